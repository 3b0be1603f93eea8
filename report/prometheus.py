"""A small Prometheus HTTP API client on urllib: instant and range queries, raw samples."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any


class PrometheusError(RuntimeError):
    """Prometheus could not be reached or refused a query; the message says which and why."""


@dataclass(frozen=True)
class Series:
    """One series of an answer: its labels and its (unix time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]

    @property
    def value(self) -> float:
        """The value of an instant query's series (its last point)."""
        return self.points[-1][1]

    def label(self, name: str) -> str:
        return self.labels.get(name, "")


class Prometheus:
    """Asks one Prometheus-compatible server (Prometheus, VictoriaMetrics, Thanos, Mimir)."""

    def __init__(self, url: str, timeout: float = 30) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as error:
            # Prometheus answers a bad query with 400 and a JSON error: pass its sentence on.
            try:
                reason = json.loads(error.read()).get("error", error.reason)
            except (ValueError, AttributeError):
                reason = error.reason
            raise PrometheusError(f"{self.url} refused the query: {reason}") from None
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {reason}") from None
        except ValueError:
            raise PrometheusError(f"{self.url} is not a Prometheus API: no JSON") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusError(f"{self.url} answered an error: {body!r:.200}")
        return body["data"]

    def check(self) -> None:
        """PrometheusError unless the server answers its query API."""
        self.instant("vector(1)", None)

    def instant(self, expr: str, at: float | None) -> list[Series]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return _series(self._get("/api/v1/query", params))

    def range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return _series(self._get("/api/v1/query_range", params))


def _series(data: Any) -> list[Series]:
    kind = data.get("resultType")
    result = data.get("result", [])
    if kind == "scalar":
        return [Series({}, [(float(result[0]), float(result[1]))])]
    if kind == "vector":
        return [
            Series(dict(item["metric"]), [(float(item["value"][0]), float(item["value"][1]))])
            for item in result
        ]
    if kind == "matrix":
        return [
            Series(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
            for item in result
        ]
    raise PrometheusError(f"unexpected result type {kind!r}")
