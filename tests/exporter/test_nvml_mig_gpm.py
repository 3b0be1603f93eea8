"""GPM per MIG instance on Hopper: nvmlGpmMigSampleGet per GPU instance, over the stand-in."""

from __future__ import annotations

import pytest

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.nvml import NvmlBackend
from mirrorwatch.exporter.nvml.lifecycle import GPM_SAMPLE_INTERVAL_S
from tests.exporter.nvml_standin.bindings import BINDINGS, load_binding, unload
from tests.exporter.nvml_standin.boards import GIB, Board, MigSlot
from tests.exporter.nvml_standin.branches import BRANCHES
from tests.exporter.nvml_standin.library import StandIn

H100_MIG = Board(
    "H100 (MIG on)",
    "NVIDIA H100 80GB HBM3",
    80 * GIB,
    0,
    512 * 2**20,
    nvlinks=18,
    gpm=True,
    mig_capable=True,
    # Two compute instances share GPU instance 2; GPU instance 9 has one.
    mig=(
        MigSlot(0, 2, 0, "3g.40gb", 40 * GIB, 10 * GIB, (7001,)),
        MigSlot(1, 2, 1, "3g.40gb", 40 * GIB, 10 * GIB, ()),
        MigSlot(4, 9, 0, "1g.10gb", 10 * GIB, 2 * GIB, ()),
    ),
    processes=(),
    gpus=1,
)
SM_UTIL = 2  # NVML_GPM_METRIC_SM_UTIL


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scrape(branch_name: str) -> tuple[dict[tuple[str, str], float], StandIn]:
    branch = next(b for b in BRANCHES if b.name == branch_name)
    nvml = load_binding(BINDINGS[-1])
    standin = StandIn(nvml, branch, H100_MIG)
    nvml.nvmlLib = standin  # type: ignore[attr-defined]
    clock = Clock()
    backend = NvmlBackend(nvml=nvml, background=False, clock=clock)
    try:
        backend.start()
        for _ in range(3):  # two samples of each target make the first interval
            backend.poll()
            clock.now += GPM_SAMPLE_INTERVAL_S
        metrics = GpuMetrics(backend, ExporterInfo("0", run_ttl_seconds=300))
        samples = {
            (sample.name, dict(sample.labels).get("gpu_instance", "")): sample.value
            for family in metrics.collect()
            for sample in family.samples
            if "activity" in sample.name
        }
    finally:
        backend.shutdown()
        unload(nvml)
    return samples, standin


@pytest.mark.parametrize("branch", ["R550", "R580"])
def test_each_gpu_instance_has_its_own_gpm_and_the_parent_none(branch: str) -> None:
    samples, standin = scrape(branch)
    for gpu_instance in (2, 9):
        want = standin.gpm_percent(0, gpu_instance, SM_UTIL) / 100
        assert samples[("mirrorwatch_gpu_mig_sm_activity_ratio", str(gpu_instance))] == want
    # One series per GPU instance, however many compute instances share it.
    assert [k for k in samples if k[0] == "mirrorwatch_gpu_mig_sm_activity_ratio"] == [
        ("mirrorwatch_gpu_mig_sm_activity_ratio", "2"),
        ("mirrorwatch_gpu_mig_sm_activity_ratio", "9"),
    ]
    assert ("mirrorwatch_gpu_sm_activity_ratio", "") not in samples
