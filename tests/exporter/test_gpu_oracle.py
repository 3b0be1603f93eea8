"""The GPU families a scrape writes are what prometheus_client writes from the backend's readings.

The oracle reads each GPU through the backend's interface and builds plain prometheus_client
families (``GaugeMetricFamily``, ``CounterMetricFamily``) from the readings and the table of
metric names, here in the test, never from the exporter's series or lines; prometheus_client's
own encoders write them. Over scrapes whose readings repeat, change, flip the sign of zero, turn
NaN or infinite, lose a GPU, swap a board under the same index and churn pids, every family the
exporter writes must match, byte for byte, in both formats. Breaking the series cache's key
must make it fail (the issue that asked for this oracle found a broken key passing the tests
that rendered from the cache they tested).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics

from mirrorwatch.contract import metrics as names
from mirrorwatch.exporter.backend import (
    CLOCKS,
    PROCESS_TYPES,
    TEMPERATURE_THRESHOLDS,
    GpmReading,
    GpuDevice,
    GpuProcess,
    GpuProcesses,
    NvlinkCounters,
    PeerLink,
)
from mirrorwatch.exporter.collectors import base
from mirrorwatch.exporter.collectors.processes import UNKNOWN_PROCESS, top_by_memory
from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.exposition import OpenMetricsRenderer, TextRenderer
from mirrorwatch.exporter.simulate.backend import SimulatedBackend
from mirrorwatch.exporter.simulate.scenario import load_scenario
from tests.exporter.broken_key import Key, KeyChanging
from tests.exporter.static_gpu import StaticBackend, StaticGpu

# The exporter's own families: not GPU series (and durations are wall-clock timings).
NOT_GPU = ("mirrorwatch_exporter_", "mirrorwatch_up")
NAN, INF = float("nan"), float("inf")


class Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


class Oracle:
    """The GPU families of one scrape, from the readings, in prometheus_client's families."""

    def __init__(self) -> None:
        self.families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

    def add(self, metric: names.Metric, gpu: GpuDevice, value: float | None, *extra: str) -> None:
        if value is None:  # unsupported: absent
            return
        family = self.families.get(metric)
        if family is None:
            labels = list(metric.labels)
            if metric.type == "counter":
                family = CounterMetricFamily(metric.family, metric.help, labels=labels)
            else:
                family = GaugeMetricFamily(metric.family, metric.help, labels=labels)
            self.families[metric] = family
        family.add_metric([str(gpu.index), gpu.uuid, *extra], value)


def oracle(gpus: list[GpuDevice], top: int) -> list[Metric]:
    """Every GPU family of a scrape of ``gpus``: the readings, as the metrics table names them."""
    expected = Oracle()
    add = expected.add
    alive = [gpu for gpu in gpus if gpu.alive()]
    for gpu in gpus:
        add(names.GPU_INFO, gpu, 1, gpu.name, gpu.pci_bus_id)
        add(names.GPU_UP, gpu, 1 if gpu in alive else 0)
        for xid, count in sorted(gpu.xid_errors_total().items()):
            add(names.GPU_XID_ERRORS_TOTAL, gpu, count, str(xid))
        for xid, at in sorted(gpu.xid_last_event_timestamp_seconds().items()):
            add(names.GPU_XID_LAST_EVENT_TIMESTAMP_SECONDS, gpu, at, str(xid))
        for peer in gpu.peers():
            add(names.GPU_P2P_LINK_INFO, gpu, 1, str(peer.peer_index), peer.link)
    for gpu in alive:
        add(names.GPU_UTILIZATION_RATIO, gpu, gpu.utilization_ratio())
        add(names.GPU_MEMORY_UTILIZATION_RATIO, gpu, gpu.memory_utilization_ratio())
        memory = gpu.memory_bytes()
        if memory is not None:
            add(names.GPU_MEMORY_USED_BYTES, gpu, memory.used)
            add(names.GPU_MEMORY_TOTAL_BYTES, gpu, memory.total)
        add(names.GPU_TEMPERATURE_CELSIUS, gpu, gpu.temperature_celsius())
        for threshold in TEMPERATURE_THRESHOLDS:
            limit = gpu.temperature_threshold_celsius(threshold)
            add(names.GPU_TEMPERATURE_THRESHOLD_CELSIUS, gpu, limit, threshold)
        for fan, speed in enumerate(gpu.fan_speed_ratios()):
            add(names.GPU_FAN_SPEED_RATIO, gpu, speed, str(fan))
        add(names.GPU_POWER_WATTS, gpu, gpu.power_watts())
        add(names.GPU_POWER_LIMIT_WATTS, gpu, gpu.power_limit_watts())
        add(names.GPU_ENERGY_JOULES_TOTAL, gpu, gpu.energy_joules_total())
        for clock in CLOCKS:
            add(names.GPU_CLOCK_HERTZ, gpu, gpu.clock_hertz(clock), clock)
            add(names.GPU_CLOCK_MAX_HERTZ, gpu, gpu.clock_max_hertz(clock), clock)
        for reason, active in (gpu.clocks_event_reasons() or {}).items():
            add(names.GPU_CLOCKS_EVENT_ACTIVE, gpu, 1 if active else 0, reason)
        for reason, seconds in gpu.throttle_seconds_total().items():
            add(names.GPU_THROTTLE_SECONDS_TOTAL, gpu, seconds, reason)
        link = gpu.pcie_link()
        if link is not None:
            add(names.GPU_PCIE_LINK_GENERATION, gpu, link.generation)
            add(names.GPU_PCIE_LINK_GENERATION_MAX, gpu, link.generation_max)
            add(names.GPU_PCIE_LINK_WIDTH, gpu, link.width)
            add(names.GPU_PCIE_LINK_WIDTH_MAX, gpu, link.width_max)
        traffic = gpu.pcie_bytes_total()
        if traffic is not None:
            add(names.GPU_PCIE_TRANSMIT_BYTES_TOTAL, gpu, traffic[0])
            add(names.GPU_PCIE_RECEIVE_BYTES_TOTAL, gpu, traffic[1])
        add(names.GPU_PCIE_REPLAYS_TOTAL, gpu, gpu.pcie_replays_total())
        for number, nvlink in sorted(gpu.nvlinks().items()):
            add(names.GPU_NVLINK_UP, gpu, 1 if nvlink.up else 0, str(number))
            add(names.GPU_NVLINK_TRANSMIT_BYTES_TOTAL, gpu, nvlink.transmit_bytes, str(number))
            add(names.GPU_NVLINK_RECEIVE_BYTES_TOTAL, gpu, nvlink.receive_bytes, str(number))
            for error_type, count in nvlink.errors.items():
                add(names.GPU_NVLINK_ERRORS_TOTAL, gpu, count, str(number), error_type)
        for ecc_type, count in (gpu.ecc_errors_total() or {}).items():
            add(names.GPU_ECC_ERRORS_TOTAL, gpu, count, ecc_type)
        processes = gpu.processes()
        if processes is not None:
            for kind in PROCESS_TYPES:
                if kind in processes.counts:
                    add(names.GPU_PROCESSES, gpu, processes.counts[kind], kind)
            used = [p.used_memory_bytes for p in processes.processes]
            known = [bytes_ for bytes_ in used if bytes_ is not None]
            if known or not used:
                add(names.GPU_PROCESSES_MEMORY_USED_BYTES, gpu, sum(known))
            for process in top_by_memory(processes.processes, top):
                labels = (str(process.pid), process.name or UNKNOWN_PROCESS)
                add(names.GPU_PROCESS_MEMORY_USED_BYTES, gpu, process.used_memory_bytes, *labels)
                ratio = process.sm_utilization_ratio
                add(names.GPU_PROCESS_SM_UTILIZATION_RATIO, gpu, ratio, *labels)
        gpm = gpu.gpm()
        if gpm is not None:
            add(names.GPU_SM_ACTIVITY_RATIO, gpu, gpm.sm_activity_ratio)
            add(names.GPU_SM_OCCUPANCY_RATIO, gpu, gpm.sm_occupancy_ratio)
            add(names.GPU_TENSOR_ACTIVITY_RATIO, gpu, gpm.tensor_activity_ratio)
            add(names.GPU_DRAM_ACTIVITY_RATIO, gpu, gpm.dram_activity_ratio)
        mig(add, gpu)
    return list(expected.families.values())


def mig(add: Callable[..., None], gpu: GpuDevice) -> None:
    """A MIG-enabled GPU's devices; GPM once per GPU instance (its compute instances share it)."""
    enabled = gpu.mig_enabled()
    if enabled is None:
        return
    add(names.GPU_MIG_ENABLED, gpu, 1.0 if enabled else 0.0)
    instances = set()
    for device in gpu.mig_devices():
        ids = (str(device.gpu_instance), str(device.compute_instance))
        add(names.GPU_MIG_INFO, gpu, 1, device.mig_uuid, *ids, device.profile)
        if device.memory is not None:
            add(names.GPU_MIG_MEMORY_USED_BYTES, gpu, device.memory.used, *ids)
            add(names.GPU_MIG_MEMORY_TOTAL_BYTES, gpu, device.memory.total, *ids)
        add(names.GPU_MIG_PROCESSES, gpu, device.processes, *ids)
        if device.gpm is not None and device.gpu_instance not in instances:
            instances.add(device.gpu_instance)
            add(names.GPU_MIG_SM_ACTIVITY_RATIO, gpu, device.gpm.sm_activity_ratio, ids[0])
            add(names.GPU_MIG_SM_OCCUPANCY_RATIO, gpu, device.gpm.sm_occupancy_ratio, ids[0])
            add(names.GPU_MIG_TENSOR_ACTIVITY_RATIO, gpu, device.gpm.tensor_activity_ratio, ids[0])
            add(names.GPU_MIG_DRAM_ACTIVITY_RATIO, gpu, device.gpm.dram_activity_ratio, ids[0])


def by_family(text: str) -> dict[str, str]:
    """An exposition's text per family (its HELP line on), without the exporter's own."""
    blocks = {}
    for block in text.removesuffix("# EOF\n").split("# HELP ")[1:]:
        if not block.startswith(NOT_GPU):
            blocks[block.split(" ", 1)[0]] = "# HELP " + block
    return blocks


# Each family's text in the text format and in OpenMetrics.
Written = tuple[dict[str, str], dict[str, str]]


def prometheus_client_writes(families: list[Metric]) -> Written:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(families))
    encoded: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
    return by_family(generate_latest(registry).decode()), by_family(encoded.decode())


def the_exporter_writes(metrics: GpuMetrics) -> Written:
    families = list(metrics.collect())
    text = TextRenderer().render(families).decode()
    return by_family(text), by_family(OpenMetricsRenderer().render(families).decode())


def board(index: int, uuid: str, pids: tuple[int, ...]) -> StaticGpu:
    processes = [
        GpuProcess(pid, f"python{pid % 3}" if pid % 4 else "", "compute", pid * 1e6, 0.25)
        for pid in pids
    ]
    return StaticGpu(
        index=index,
        uuid=uuid,
        pci_bus_id=f"0000:{index + 0x1B:02x}:00.0",
        fans=(0.45, 0.5),
        links={
            0: NvlinkCounters(True, 5e9, 6e9, {"replay": 0, "crc_flit": 3}),
            1: NvlinkCounters(False, None, 1.0, {"replay": 1}),
        },
        xids={79: 1.0, 13: 2.0},
        xid_last_events={79: 1_700_000_500.0},
        peer_links=(PeerLink(1 - index, "nvlink"),),
        process_list=GpuProcesses({"compute": len(pids), "graphics": 0}, processes),
        gpm_reading=GpmReading(0.5, 0.25, 0.75, 0.125),
    )


Step = Callable[[list[StaticGpu]], list[StaticGpu]]


def replace(**changes: object) -> Step:
    """The same GPUs, each with ``changes`` to its readings."""
    return lambda gpus: [dataclasses.replace(gpu, **changes) for gpu in gpus]  # type: ignore[arg-type]


UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = 'GPU-"bbbbbbbb"-0000'  # a value to escape
UUID_C = "GPU-cccccccc-0000-0000-0000-000000000000"
# Each scrape's readings, from the last one's: the oracle and the exporter read the same.
STEPS: tuple[tuple[str, Step], ...] = (
    ("first scrape", lambda gpus: gpus),
    ("every reading repeats", lambda gpus: gpus),
    ("values change", replace(temperature=65.0, utilization=0.5, energy=123457.0, power=600.25)),
    ("the same again", lambda gpus: gpus),
    ("zero", replace(temperature=0.0, utilization=0.0, power=0.0)),
    ("negative zero", replace(temperature=-0.0, utilization=-0.0, power=-0.0)),
    ("zero again", replace(temperature=0.0, utilization=-0.0, power=0.0)),
    ("NaN twice", replace(temperature=NAN, utilization=NAN)),
    ("NaN again", replace(temperature=NAN, utilization=NAN)),
    ("infinities", replace(temperature=INF, utilization=-INF, energy=INF, power=1e22)),
    ("a reading becomes unsupported", replace(temperature=None, fans=(None, 0.5), power=None)),
    ("and comes back", replace(temperature=70.0, fans=(0.45, 0.5), power=650.0)),
    ("GPU 1 is lost", lambda gpus: [gpus[0], dataclasses.replace(gpus[1], is_alive=False)]),
    ("GPU 1 disappears", lambda gpus: gpus[:1]),
    ("GPU 1 is back, another board", lambda gpus: [gpus[0], board(1, UUID_C, (7, 8))]),
    ("pids churn", lambda gpus: [board(0, UUID_A, (101, 102, 103)), board(1, UUID_C, (9,))]),
    ("pids churn more", lambda gpus: [board(0, UUID_A, (104,)), board(1, UUID_C, (9, 10, 11))]),
    ("the boards swap indices", lambda gpus: [board(0, UUID_C, (9,)), board(1, UUID_A, (104,))]),
)


def scrapes(top: int = 2) -> Iterator[tuple[str, Written, Written]]:
    """Each step's (what prometheus_client writes, what the exporter writes)."""
    gpus = [board(0, UUID_A, (1, 2, 3)), board(1, UUID_B, (4,))]
    backend = StaticBackend(list(gpus))
    metrics = GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300, top_processes=top))
    for step, change in STEPS:
        gpus = change(gpus)
        backend.devices = list(gpus)
        yield step, prometheus_client_writes(oracle(list(gpus), top)), the_exporter_writes(metrics)


def test_every_gpu_family_is_what_prometheus_client_writes_from_the_readings() -> None:
    written = set()
    for step, expected, exported in scrapes():
        assert exported[0] == expected[0], step  # the text format
        assert exported[1] == expected[1], step  # OpenMetrics
        written |= set(exported[0])
    gpu_families = {str(m) for m in names.METRICS if m.labels[:2] == names.GPU}
    unwritten = gpu_families - written
    # MIG (below, on the simulator) and the training join's foreign processes
    # (test_ingest_processes.py) are the only GPU families these boards do not have.
    assert {name for name in unwritten if "_mig_" not in name and "foreign" not in name} == set()


@pytest.mark.parametrize("scenario", ["gpu-lost", "xid", "mig"])
def test_a_simulated_host_writes_what_prometheus_client_writes_from_its_readings(
    scenario: str,
) -> None:
    # The simulator's readings at each second, going back in time too: a lost GPU (20 s), XID
    # events that come and go, MIG devices.
    now = [0.0]
    backend = SimulatedBackend(load_scenario(scenario, gpus=4), clock=lambda: now[0])
    metrics = GpuMetrics(backend, ExporterInfo("1", run_ttl_seconds=300))
    for now[0] in (5.0, 5.0, 5.25, 6.0, 19.5, 25.0, 25.0, 7.0, 300.0):
        exported = the_exporter_writes(metrics)
        assert exported == prometheus_client_writes(oracle(list(backend.gpus()), 5)), now[0]
    if scenario == "mig":
        assert "mirrorwatch_gpu_mig_info" in exported[0]


@pytest.mark.parametrize(
    ("broken", "key"),
    [
        ("without the uuid", lambda key: (key[0], key[1], key[3])),
        ("without the extra label values", lambda key: key[:3]),
        ("without the GPU index", lambda key: (key[0], key[2], key[3])),
    ],
)
def test_a_broken_series_cache_key_fails_the_oracle(
    monkeypatch: pytest.MonkeyPatch,
    broken: str,
    key: Callable[[Key], Key],
) -> None:
    monkeypatch.setattr(base, "_SERIES", KeyChanging(key))
    differing = [step for step, expected, exported in scrapes() if exported != expected]
    assert differing, f"a series cache key {broken} passed the oracle"
