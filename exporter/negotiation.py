"""Content negotiation for /metrics: which format (Accept) and whether gzip (Accept-Encoding).

Both follow RFC 9110: §12.4.2 quality values (q=0 means "not acceptable"), §12.5.1 Accept
(the most specific media range that matches an offer gives its q; the highest q wins) and
§12.5.3 Accept-Encoding (a coding with q=0, by name or by `*`, is refused).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from mirrorwatch.exporter.exposition import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE


@dataclass(frozen=True)
class Offer:
    """One format the exporter renders: its media type and the parameters it satisfies."""

    name: str
    media_type: str
    version: str
    content_type: str


TEXT = Offer("text", "text/plain", "0.0.4", CONTENT_TYPE)
OPENMETRICS = Offer(
    "openmetrics", "application/openmetrics-text", "1.0.0", OPENMETRICS_CONTENT_TYPE
)
# Server preference breaks ties: text first, so a browser's or curl's `*/*` reads text.
OFFERS = (TEXT, OPENMETRICS)
# The renderers write only legacy-valid names, which these escaping schemes leave unchanged
# (prometheus_client openmetrics/exposition.py `escape_metric_name`); `dots` would rewrite
# every `_`, so a range asking for it does not match.
_ESCAPINGS = frozenset({"allow-utf-8", "underscores", "values"})


@dataclass(frozen=True)
class _Range:
    media_type: str  # lower case; may be "type/*" or "*/*"
    params: dict[str, str]
    q: float
    position: int


def _quality(text: str) -> float | None:
    """A qvalue (RFC 9110 §12.4.2: 0 to 1, at most three decimals), or None if malformed."""
    try:
        q = float(text)
    except ValueError:
        return None
    return q if 0.0 <= q <= 1.0 else None


def _split(element: str) -> tuple[str, dict[str, str]]:
    head, *rest = element.split(";")
    params: dict[str, str] = {}
    for param in rest:
        key, _, value = param.partition("=")
        params[key.strip().lower()] = value.strip().strip('"')
    return head.strip().lower(), params


def _ranges(accept: str) -> list[_Range]:
    ranges = []
    for position, element in enumerate(accept.split(",")):
        media_type, params = _split(element)
        if "/" not in media_type:
            continue  # empty list elements are allowed (RFC 9110 §5.6.1); junk is skipped
        q = _quality(params.pop("q", "1"))
        if q is not None:
            ranges.append(_Range(media_type, params, q, position))
    return ranges


def _matches(accepted: _Range, offer: Offer) -> bool:
    if accepted.media_type not in (offer.media_type, "*/*", offer.media_type.split("/")[0] + "/*"):
        return False
    for key, value in accepted.params.items():
        # No `version` matches any: bare text/plain is 0.0.4 to Prometheus's expfmt, and bare
        # OpenMetrics gets 1.0.0 from prometheus_client too.
        if key == "version":
            if value != offer.version:
                return False
        elif key == "charset":
            if value.lower() != "utf-8":
                return False
        elif key == "escaping":
            if value not in _ESCAPINGS:
                return False
        else:
            return False  # a parameter this exporter knows nothing of: not what it renders
    return True


def _specificity(accepted: _Range) -> tuple[int, int]:
    if accepted.media_type == "*/*":
        return (0, 0)
    if accepted.media_type.endswith("/*"):
        return (1, 0)
    return (2, len(accepted.params))


# A scraper sends the same Accept every time (12 us to parse Prometheus's): kept by its text.
@lru_cache(maxsize=64)
def choose_format(accept: str | None) -> Offer | None:
    """The offer the client prefers most, or None if it accepts none of them (406).

    Each offer takes the q of the most specific matching range; the highest q wins, then the
    range named earlier in the header, then the server's order (OFFERS).
    """
    if accept is None or not accept.strip():
        return TEXT  # no Accept header: any format is acceptable (RFC 9110 §12.5.1)
    ranges = _ranges(accept)
    best: tuple[float, int, int] | None = None
    chosen: Offer | None = None
    for preference, offer in enumerate(OFFERS):
        matching = [accepted for accepted in ranges if _matches(accepted, offer)]
        if not matching:
            continue
        top = max(matching, key=_specificity)
        if top.q <= 0:
            continue
        key = (top.q, -top.position, -preference)
        if best is None or key > best:
            best, chosen = key, offer
    return chosen


def accepts_gzip(accept_encoding: str | None) -> bool:
    """Whether gzip is acceptable and preferred to no coding at all (RFC 9110 §12.5.3)."""
    if accept_encoding is None:
        return False
    codings: dict[str, float] = {}
    for element in accept_encoding.split(","):
        coding, params = _split(element)
        q = _quality(params.get("q", "1"))
        if coding and q is not None:
            codings[coding] = q
    star = codings.get("*", 0.0)
    gzip_q = codings.get("gzip", codings.get("x-gzip", star))
    # An unlisted identity is merely acceptable, not preferred: it never outbids gzip.
    return gzip_q > 0 and gzip_q >= codings.get("identity", 0.0)
