"""The shared vocabulary: each fact once, with the spellings every other system uses."""

from __future__ import annotations

import pytest

from mirrorwatch.contract.vocabulary import (
    MAX_WORKER,
    Address,
    canonical_bus_id,
    format_duration,
    is_prometheus_duration,
    is_run_id,
    nvml_bus_id,
    parse_duration,
    parse_prometheus_duration,
)


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),  # NVML's nvmlDeviceGetPciInfo().busId
        ("0000:1b:00.0", "0000:1b:00.0"),  # TensorFlow's physical_device_desc, sysfs, lspci -D
        ("1b:00.0", "0000:1b:00.0"),  # lspci without -D
        (" 0001:AF:1F.7 ", "0001:af:1f.7"),
    ],
)
def test_every_spelling_of_a_bus_id_becomes_one(spelling: str, canonical: str) -> None:
    assert canonical_bus_id(spelling) == canonical


@pytest.mark.parametrize("text", ["", "GPU-1234", "0000:1b:00", "0000:1b:00.8", "zz:00.0"])
def test_a_non_bus_id_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a PCI bus id"):
        canonical_bus_id(text)


def test_nvml_spelling_round_trips() -> None:
    assert nvml_bus_id("0000:1b:00.0") == "00000000:1B:00.0"
    assert canonical_bus_id(nvml_bus_id("0000:af:1f.7")) == "0000:af:1f.7"


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(90, 90.0), ("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("250ms", 0.25)],
)
def test_durations_parse_to_seconds(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", [-1, "5 minutes", "m5", True, float("nan"), ""])
def test_a_bad_duration_names_the_forms(value: object) -> None:
    with pytest.raises(ValueError, match="1h30m"):
        parse_duration(value)


def test_prometheus_durations_are_whole_units_largest_first() -> None:
    assert parse_prometheus_duration("1h30m") == 5400.0
    assert is_prometheus_duration("0s")
    for text in ("90", "1.5m", "30m1h", ""):
        assert not is_prometheus_duration(text), text
    assert [format_duration(s) for s in (0, 90, 0.25)] == ["0s", "90s", "250ms"]


def test_run_ids_and_workers() -> None:
    assert is_run_id("resnet50-2026.12.01_a")
    assert not is_run_id("has space")
    assert not is_run_id("x" * 65)
    assert MAX_WORKER == 1023  # the contract's bound


@pytest.mark.parametrize(
    ("text", "host", "port"), [("127.0.0.1:9090", "127.0.0.1", 9090), ("[::1]:9848", "::1", 9848)]
)
def test_addresses_parse(text: str, host: str, port: int) -> None:
    address = Address.parse(text)
    assert (address.host, address.port) == (host, port)
    assert str(address) == text


@pytest.mark.parametrize("text", ["9090", "host:", ":9090", "host:x"])
def test_a_bad_address_says_host_port(text: str) -> None:
    with pytest.raises(ValueError, match="HOST:PORT"):
        Address.parse(text)


@pytest.mark.parametrize("text", ["host:0", "host:65536", "127.0.0.1:99999"])
def test_a_port_out_of_range_says_the_range(text: str) -> None:
    with pytest.raises(ValueError, match=r"out of range 1\.\.65535"):
        Address.parse(text)
