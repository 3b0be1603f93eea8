"""The report keys every GPU by the target key (cluster, host, job, instance, gpu, uuid): two
hosts behind agents that share `instance` keep their GPU 0s apart.

Each answer here is what Prometheus gives for such a fleet: the series of both hosts, told
apart by `host` alone. The live form of the same fleet is tests/fleet/test_shared_instance.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirrorwatch.alerts.thresholds import load_thresholds
from mirrorwatch.report import hardware, page, workload
from mirrorwatch.report.evidence import Ask
from mirrorwatch.report.prometheus import Prometheus, Series
from mirrorwatch.report.scope import Gpu, Scope

INSTANCE = "localhost:9848"
END = 1_700_000_600.0


def gpu(host: str, index: str) -> Gpu:
    return Gpu(INSTANCE, index, f"GPU-{host}-{index}", "H100", "lab", host, "mirrorwatch")


GPUS = (gpu("gpu-a", "0"), gpu("gpu-a", "1"), gpu("gpu-b", "0"), gpu("gpu-b", "1"))


def scope() -> Scope:
    """A run whose workers train on both hosts: the scope find_scope gives it."""
    return Scope(END - 600, END, 2, "r", (INSTANCE,), GPUS)


class Answers(Prometheus):
    """Answers every instant query with one value per GPU (``per_gpu``), and, for the queries
    of a whole host (grouped by the target key: no `gpu` label), one per host (``per_host``)."""

    def __init__(self, per_gpu: Mapping[Gpu, float], per_host: Mapping[str, float]) -> None:
        super().__init__("http://127.0.0.1:1")
        self.per_gpu, self.per_host = per_gpu, per_host

    def instant(self, expr: str, at: float | None) -> list[Series]:
        if "by (cluster, host, job, instance)" in expr and "group_left" not in expr:
            target = {"cluster": "lab", "job": "mirrorwatch", "instance": INSTANCE}
            return [
                Series({**target, "host": host}, [(END, value)])
                for host, value in self.per_host.items()
            ]
        return [Series(dict(g.labels), [(END, value)]) for g, value in self.per_gpu.items()]


def test_throttling_names_the_gpu_0_of_the_host_that_throttled() -> None:
    # gpu-b's GPU 0 was held back for half the range; gpu-a's GPU 0, the same index on the same
    # instance, not at all. Keyed by (instance, gpu) alone, one would take the other's share.
    shares = {GPUS[0]: 0.0, GPUS[1]: 0.0, GPUS[2]: 0.5, GPUS[3]: 0.0}
    ask = Ask(Answers(shares, {}), scope())
    findings = hardware.throttling(ask, load_thresholds())
    assert findings, "gpu-b's GPU 0 throttled for half the range"
    assert {(f.labels["host"], f.gpu) for f in findings} == {("gpu-b", "0")}
    assert all(f.share == 0.5 for f in findings)
    for finding in findings:
        assert {fig.labels["host"] for fig in finding.figures} == {"gpu-b"}
    html = page._finding(1, findings[0], {}, "docs/runbook.md")
    assert f"GPU 0 on {INSTANCE} (host gpu-b)" in html


def test_an_imbalance_is_measured_within_one_host() -> None:
    # gpu-a is balanced at 90%; on gpu-b GPU 0 lags at 50%. The GPU 0s share index and
    # instance, so only the target key keeps gpu-a's busy GPU 0 out of gpu-b's spread.
    means = {GPUS[0]: 0.9, GPUS[1]: 0.9, GPUS[2]: 0.5, GPUS[3]: 0.9}
    ask = Ask(Answers(means, {"gpu-a": 0.0, "gpu-b": 0.4}), scope())
    (finding,) = workload.imbalance(ask, load_thresholds())
    assert (finding.labels["host"], finding.gpu) == ("gpu-b", "0")
    assert finding.labels["uuid"] == "GPU-gpu-b-0"
    assert "GPU 0 lags: 50 % busy against GPU 1's 90 %" in finding.summary, finding.summary
    lagging = next(f for f in finding.figures if f.name == "GPU 0 mean utilisation")
    assert (lagging.value, lagging.labels["host"]) == (0.5, "gpu-b")
