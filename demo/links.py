"""The Prometheus pages the demo links, as the Prometheus it runs serves them.

Debian 12's Prometheus (2.42) is built without the React UI: it serves /classic/alerts and
/classic/graph, and /alerts is a 404. Upstream's builds serve /alerts and /graph (and 3.x
dropped /classic). The demo asks the running binary instead of guessing from its version.
"""

from __future__ import annotations

from demo.processes import http_get

PAGES = ("alerts", "graph")
_PREFIXES = ("/", "/classic/")


def answers(url: str) -> bool:
    """Whether a GET of ``url`` ends (after redirects) in a 200."""
    try:
        status, _ = http_get(url)
    except OSError:
        return False
    return status == 200


def prometheus_page(base_url: str, page: str) -> str:
    """The URL of ``page`` (alerts, graph) on the Prometheus at ``base_url``: the first path
    that answers, else the upstream one."""
    base = base_url.rstrip("/")
    for prefix in _PREFIXES:
        if answers(f"{base}{prefix}{page}"):
            return f"{base}{prefix}{page}"
    return f"{base}/{page}"


def prometheus_pages(base_url: str) -> dict[str, str]:
    """Every page the demo links, by name."""
    return {page: prometheus_page(base_url, page) for page in PAGES}
