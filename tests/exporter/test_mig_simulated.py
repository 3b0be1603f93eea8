"""The simulated `mig` scenario: MIG devices published, the MIG parent's utilisation absent."""

from __future__ import annotations

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.simulate.backend import SimulatedBackend
from mirrorwatch.exporter.simulate.scenario import load_scenario


def _samples() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    backend = SimulatedBackend(load_scenario("mig"), clock=lambda: 30.0)
    metrics = GpuMetrics(backend, ExporterInfo("0", run_ttl_seconds=300))
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in metrics.collect()
        for sample in family.samples
    }


def test_each_mig_device_has_its_info_and_memory_at_its_sparse_instance_ids() -> None:
    samples = _samples()
    info = sorted(
        (dict(labels)["gpu_instance"], dict(labels)["profile"])
        for (name, labels) in samples
        if name == "mirrorwatch_gpu_mig_info"
    )
    assert info == [("1", "3g.40gb"), ("5", "2g.20gb"), ("6", "2g.20gb")]
    totals = {
        dict(labels)["gpu_instance"]: value
        for (name, labels), value in samples.items()
        if name == "mirrorwatch_gpu_mig_memory_total_bytes"
    }
    assert totals == {"1": 40 * 2**30, "5": 20 * 2**30, "6": 20 * 2**30}


def test_the_mig_parent_publishes_no_utilization_and_the_other_gpu_does() -> None:
    samples = _samples()
    utilization = {
        dict(labels)["gpu"]
        for (name, labels) in samples
        if name == "mirrorwatch_gpu_utilization_ratio"
    }
    assert utilization == {"1"}
    enabled = {
        dict(labels)["gpu"]: value
        for (name, labels), value in samples.items()
        if name == "mirrorwatch_gpu_mig_enabled"
    }
    assert enabled == {"0": 1.0, "1": 0.0}
