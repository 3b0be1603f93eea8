"""Format and coding negotiation for /metrics follows RFC 9110's Accept and Accept-Encoding."""

from __future__ import annotations

import pytest

from mirrorwatch.exporter.negotiation import OPENMETRICS, TEXT, accepts_gzip, choose_format

# prometheus/prometheus scrape/scrape.go acceptHeader() over config.go's four-entry
# ScrapeProtocolsHeaders and DefaultScrapeProtocols (2.55): weights 0.5 down to */* at 0.2.
PROMETHEUS_2_55 = (
    "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
# The constant acceptHeader of scrape/scrape.go before scrape_protocols: what Debian's 2.42
# binary sends (captured from it), with Accept-Encoding: gzip.
PROMETHEUS_2_42 = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
# Prometheus 3 adds text 1.0.0 (a fifth header, so weights start at 0.6) and `escaping`.
PROMETHEUS_3 = (
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
    "application/openmetrics-text;version=0.0.1;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,"
    "*/*;q=0.2"
)


@pytest.mark.parametrize("accept", [PROMETHEUS_2_55, PROMETHEUS_2_42, PROMETHEUS_3])
def test_prometheus_gets_openmetrics(accept: str) -> None:
    assert choose_format(accept) is OPENMETRICS


@pytest.mark.parametrize("accept", [None, "", "*/*", "text/*", "text/plain", "text/html,*/*;q=0.8"])
def test_browsers_curl_and_no_header_get_text(accept: str | None) -> None:
    assert choose_format(accept) is TEXT


def test_the_highest_q_wins_not_the_first_listed() -> None:
    accept = "text/plain;version=0.0.4;q=0.2,application/openmetrics-text;q=0.9"
    assert choose_format(accept) is OPENMETRICS


def test_equal_q_goes_to_the_range_listed_first() -> None:
    assert choose_format("application/openmetrics-text,text/plain") is OPENMETRICS
    assert choose_format("text/plain,application/openmetrics-text") is TEXT


def test_q_zero_refuses_a_format_even_under_a_wildcard() -> None:
    assert choose_format("text/plain;q=0,*/*") is OPENMETRICS
    assert choose_format("application/openmetrics-text;q=0,*/*;q=0.1") is TEXT


def test_a_more_specific_range_overrides_a_broader_one() -> None:
    # text/plain;version=0.0.4 (q=0.1) beats text/* (q=1) for text; OpenMetrics gets */* at 0.5.
    assert choose_format("text/*,text/plain;version=0.0.4;q=0.1,*/*;q=0.5") is OPENMETRICS


def test_nothing_acceptable_is_none() -> None:
    assert choose_format("application/json") is None
    assert choose_format("*/*;q=0") is None
    assert choose_format("text/plain;q=0,application/openmetrics-text;q=0") is None


def test_versions_and_escapings_the_renderers_do_not_write_are_not_matched() -> None:
    assert choose_format("application/openmetrics-text;version=0.0.1") is None
    assert choose_format("text/plain;version=1.0.0") is None
    assert choose_format("application/openmetrics-text;version=1.0.0;escaping=dots") is None
    assert choose_format("application/vnd.google.protobuf;proto=x;encoding=delimited") is None


def test_malformed_q_values_drop_their_range() -> None:
    assert choose_format("application/openmetrics-text;q=2,text/plain;q=0.5") is TEXT
    assert choose_format("application/openmetrics-text;q=abc") is None


@pytest.mark.parametrize(
    "accept_encoding",
    ["gzip", "gzip, deflate, br", "br;q=1, gzip;q=0.5", "*", "x-gzip", "GZIP;Q=0.3"],
)
def test_gzip_when_accepted(accept_encoding: str) -> None:
    assert accepts_gzip(accept_encoding)


@pytest.mark.parametrize(
    "accept_encoding",
    [None, "", "identity", "br", "gzip;q=0", "*;q=0", "gzip;q=0.4, identity", "*, gzip;q=0"],
)
def test_no_gzip_when_absent_refused_or_less_wanted_than_identity(
    accept_encoding: str | None,
) -> None:
    assert not accepts_gzip(accept_encoding)
