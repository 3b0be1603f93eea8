"""The processes and GPM collectors: bounded per-process series, counts always, GPM ratios."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mirrorwatch.exporter.backend import GpmReading, GpuProcess, GpuProcesses
from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from tests.exporter.static_gpu import GIB, StaticBackend, StaticGpu

UUID1 = "GPU-11111111-1111-1111-1111-111111111111"


def scrape(
    backend: StaticBackend, top: int = 5
) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    registry = CollectorRegistry(auto_describe=False)
    info = ExporterInfo("1.2.3", run_ttl_seconds=300, top_processes=top)
    registry.register(GpuMetrics(backend, info, ["processes", "gpm"]))
    found: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name.startswith("mirrorwatch_exporter_"):
                continue
            key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "uuid"))
            found.setdefault(sample.name, {})[key] = sample.value
    return found


def many(count: int) -> GpuProcesses:
    """``count`` compute processes, pid 100 + i using i GiB, SM share i percent."""
    return GpuProcesses(
        counts={"compute": count, "graphics": 0},
        processes=tuple(
            GpuProcess(100 + i, f"job{i}", "compute", float(i * GIB), i / 100) for i in range(count)
        ),
    )


def test_counts_and_the_memory_total_cover_every_process() -> None:
    found = scrape(StaticBackend([StaticGpu(process_list=many(8))]))
    assert found["mirrorwatch_gpu_processes"] == {
        (("gpu", "0"), ("type", "compute")): 8.0,
        (("gpu", "0"), ("type", "graphics")): 0.0,
    }
    assert found["mirrorwatch_gpu_processes_memory_used_bytes"] == {(("gpu", "0"),): 28.0 * GIB}


def test_per_process_series_are_the_top_n_by_memory_with_pid_and_name() -> None:
    found = scrape(StaticBackend([StaticGpu(process_list=many(8))]), top=3)
    memory = found["mirrorwatch_gpu_process_memory_used_bytes"]
    assert memory == {
        (("gpu", "0"), ("pid", "107"), ("process", "job7")): 7.0 * GIB,
        (("gpu", "0"), ("pid", "106"), ("process", "job6")): 6.0 * GIB,
        (("gpu", "0"), ("pid", "105"), ("process", "job5")): 5.0 * GIB,
    }
    assert set(found["mirrorwatch_gpu_process_sm_utilization_ratio"]) == set(memory)
    assert (
        found["mirrorwatch_gpu_process_sm_utilization_ratio"][
            (("gpu", "0"), ("pid", "107"), ("process", "job7"))
        ]
        == 0.07
    )


def test_a_process_that_leaves_is_gone_from_the_next_scrape() -> None:
    gpu = StaticGpu(process_list=many(2))
    backend = StaticBackend([gpu])
    assert len(scrape(backend)["mirrorwatch_gpu_process_memory_used_bytes"]) == 2
    gpu.process_list = GpuProcesses({"compute": 1, "graphics": 0}, many(2).processes[1:])
    pids = {dict(k)["pid"] for k in scrape(backend)["mirrorwatch_gpu_process_memory_used_bytes"]}
    assert pids == {"101"}


def test_top_zero_keeps_counts_and_drops_every_per_process_series() -> None:
    found = scrape(StaticBackend([StaticGpu(process_list=many(3))]), top=0)
    assert "mirrorwatch_gpu_process_memory_used_bytes" not in found
    assert found["mirrorwatch_gpu_processes"][(("gpu", "0"), ("type", "compute"))] == 3.0


def test_unknown_memory_and_name_rank_last_and_read_unknown() -> None:
    processes = GpuProcesses(
        counts={"compute": 2},
        processes=(GpuProcess(7, "", "compute", None), GpuProcess(8, "big", "compute", GIB)),
    )
    found = scrape(StaticBackend([StaticGpu(process_list=processes)]), top=1)
    assert list(found["mirrorwatch_gpu_process_memory_used_bytes"]) == [
        (("gpu", "0"), ("pid", "8"), ("process", "big"))
    ]
    found = scrape(StaticBackend([StaticGpu(process_list=processes)]), top=2)
    sm = found.get("mirrorwatch_gpu_process_sm_utilization_ratio", {})
    assert sm == {}  # no share known: absent, never 0
    assert "mirrorwatch_gpu_processes_memory_used_bytes" in found
    assert (("gpu", "0"), ("pid", "7"), ("process", "unknown")) not in found[
        "mirrorwatch_gpu_process_memory_used_bytes"
    ]  # its memory is unknown: no memory series for it either


def test_an_empty_gpu_counts_zero_and_uses_no_memory() -> None:
    empty = GpuProcesses({"compute": 0, "graphics": 0}, ())
    found = scrape(StaticBackend([StaticGpu(process_list=empty)]))
    assert found["mirrorwatch_gpu_processes_memory_used_bytes"] == {(("gpu", "0"),): 0.0}


def test_gpus_that_cannot_list_processes_have_no_process_series() -> None:
    found = scrape(StaticBackend([StaticGpu(process_list=None)]))
    assert not any(name.startswith("mirrorwatch_gpu_process") for name in found)


def test_gpm_series_are_ratios_on_gpus_with_gpm_and_absent_elsewhere() -> None:
    hopper = StaticGpu(gpm_reading=GpmReading(0.7, 0.4, None, 0.3))
    ampere = StaticGpu(index=1, uuid=UUID1, gpm_reading=None)
    found = scrape(StaticBackend([hopper, ampere]))
    assert found["mirrorwatch_gpu_sm_activity_ratio"] == {(("gpu", "0"),): 0.7}
    assert found["mirrorwatch_gpu_sm_occupancy_ratio"] == {(("gpu", "0"),): 0.4}
    assert found["mirrorwatch_gpu_dram_activity_ratio"] == {(("gpu", "0"),): 0.3}
    assert "mirrorwatch_gpu_tensor_activity_ratio" not in found  # not answered: absent
