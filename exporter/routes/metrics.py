"""GET /metrics: text or OpenMetrics by the Accept header, gzip by Accept-Encoding."""

from __future__ import annotations

import zlib
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Response

from mirrorwatch.exporter.exposition import OpenMetricsRenderer, TextRenderer
from mirrorwatch.exporter.negotiation import OFFERS, OPENMETRICS, accepts_gzip, choose_format
from mirrorwatch.exporter.state import ExporterState, get_state

router = APIRouter()
_text = TextRenderer()
_openmetrics = OpenMetricsRenderer()
VARY = "Accept-Encoding, Accept"
# Measured on a simulated 32-GPU host (`--simulate healthy --gpus 32`), one OpenMetrics scrape
# of 405,390 bytes, CPU per compression on this 2-core CI machine (300 runs, two rounds):
#   level 1: 28,634 bytes (7.1%), 1.2-1.6 ms    level 6: 23,624 (5.8%), 4.2-4.4 ms
#   level 9: 22,544 bytes (5.6%), 8.3-10.0 ms   (Prometheus's gunzip: 0.5-0.6 ms at any level)
# Level 1 saves 377 KB for ~1.5 ms; level 6 saves 5 KB more for ~3 ms more, level 9 1 KB more
# for ~5 ms more, so past level 1 each byte costs over 100x the CPU. Prometheus asks for gzip
# by default (scrape_config enable_compression: true).
GZIP_LEVEL = 1
_GZIP_WBITS = 31  # zlib's gzip framing, mtime 0: the same body gzips to the same bytes


# A plain `def`: FastAPI runs it in the threadpool, so NVML calls never block the event loop.
@router.get("/metrics", response_class=Response, summary="Prometheus metrics")
def metrics(
    state: Annotated[ExporterState, Depends(get_state)],
    accept: Annotated[str | None, Header()] = None,
    accept_encoding: Annotated[str | None, Header()] = None,
) -> Response:
    offer = choose_format(accept)
    if offer is None:
        offered = ", ".join(item.content_type for item in OFFERS)
        return Response(
            f"none of the formats offered is acceptable: {offered}\n",
            status_code=406,
            media_type="text/plain",
            headers={"Vary": VARY},
        )
    renderer = _openmetrics if offer is OPENMETRICS else _text
    body = renderer.render(state.registry.collect())
    headers = {"Vary": VARY}
    if accepts_gzip(accept_encoding):
        body = zlib.compress(body, GZIP_LEVEL, wbits=_GZIP_WBITS)
        headers["Content-Encoding"] = "gzip"
    return Response(body, media_type=offer.content_type, headers=headers)
