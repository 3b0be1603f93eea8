"""The checks without load that need only the GPU backend (NVML or the simulated host)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import cause
from mirrorwatch.doctor.host import ProcessCpus
from mirrorwatch.doctor.model import Check, Status, skipped
from mirrorwatch.exporter.backend import DeviceConfig, GpuBackend, GpuDevice, P2pLink

# nvidia-smi topo -m's words for each link, and how a pair's all-reduce fares over it: NVLink
# and one PCIe switch are the fast paths, the host bridge is the common workstation case, and
# leaving the root complex (NODE) or the socket (SYS, across QPI/UPI) costs bandwidth.
_TOPOLOGY: Mapping[P2pLink, str] = {
    "nvlink": "NV# (NVLink)",
    "pcie_switch": "PIX/PXB (PCIe switch)",
    "pcie_host_bridge": "PHB (PCIe host bridge)",
    "numa_node": "NODE (host bridges of one NUMA node)",
    "cross_numa": "SYS (across CPU sockets)",
}
_TOPOLOGY_STATUS: Mapping[P2pLink, Status] = {
    "nvlink": "pass",
    "pcie_switch": "pass",
    "pcie_host_bridge": "pass",
    "numa_node": "warn",
    "cross_numa": "warn",
}
# The clocks-event reasons of the cause table (contract/causes.py), as the alerts read them.
_THERMAL_REASONS = cause("thermal_throttling").clock_reasons
_HARDWARE_REASONS = cause("hardware_slowdown").clock_reasons
# An enforced limit this far under the board's default is a cap someone set, not rounding.
_POWER_LIMIT_SLACK_RATIO = 0.02


@dataclass(frozen=True)
class HostView:
    """What the GPU checks compare the GPUs with: this process's CPUs, XIDs from an exporter.

    ``allowed_cpus`` are the CPUs the GPUs' local CPUs are compared with: this process's, or on
    a simulated host that host's (``process`` then says what this machine gives the process).
    ``xids`` maps a GPU's UUID to its XID counts by number; None: no exporter was asked.
    """

    allowed_cpus: frozenset[int]
    thresholds: Thresholds
    xids: Mapping[str, Mapping[int, float]] | None = None
    xids_unavailable: str = "no exporter asked (--exporter URL)"
    own_pid: int = 0
    process: ProcessCpus | None = None
    simulated: bool = False


def _gpu(device: GpuDevice) -> str:
    return str(device.index)


def _cc(config: DeviceConfig | None) -> str:
    if config is None or config.compute_capability is None:
        return "unknown"
    return "{}.{}".format(*config.compute_capability)


def gpu_count(backend: GpuBackend) -> Check:
    status = backend.status()
    if not status.up:
        return Check(
            "nvml.gpus",
            "fail",
            f"NVML unavailable: {status.reason}",
            "NVML answers and lists 2 GPUs",
            "install or load the NVIDIA driver (nvidia-smi must work), or run with --simulate",
        )
    count = len(backend.gpus())
    if count >= 2:
        return Check("nvml.gpus", "pass", f"{count} GPUs", "2 GPUs or more")
    return Check(
        "nvml.gpus",
        "fail",
        f"{count} GPU" + ("" if count == 1 else "s"),
        "2 GPUs or more",
        "check CUDA_VISIBLE_DEVICES, the container's GPU reservation and nvidia-smi -L",
    )


def same_model(devices: Sequence[GpuDevice]) -> Check:
    kinds = []
    for device in devices:
        memory = device.memory_bytes()
        gib = "?" if memory is None else f"{memory.total / 2**30:.0f} GiB"
        kinds.append(f"{device.name} {gib}")
    value = "; ".join(f"GPU {d.index}: {k}" for d, k in zip(devices, kinds, strict=True))
    if len(set(kinds)) <= 1:
        return Check("imbalance.model", "pass", value, "the same model and memory on every GPU")
    return Check(
        "imbalance.model",
        "warn",
        value,
        "the same model and memory on every GPU",
        "MirroredStrategy runs in lockstep at the slower GPU's pace: pair identical GPUs",
    )


def pcie_width(device: GpuDevice) -> Check:
    link = device.pcie_link()
    if link is None or link.width is None or link.width_max is None:
        return skipped("pcie_degraded.width", "NVML does not report the PCIe width", _gpu(device))
    value = f"x{link.width} of x{link.width_max}"
    if link.width >= link.width_max:
        return Check("pcie_degraded.width", "pass", value, f"x{link.width_max}", gpu=_gpu(device))
    return Check(
        "pcie_degraded.width",
        "fail",
        value,
        f"x{link.width_max}",
        "reseat the card or move it to a full-width slot (check risers and the board's lane "
        "sharing with M.2/other slots)",
        _gpu(device),
    )


def pcie_generation(device: GpuDevice, busy_ratio: float) -> Check:
    link = device.pcie_link()
    gpu = _gpu(device)
    if link is None or link.generation is None or link.generation_max is None:
        return skipped("pcie_degraded.generation", "NVML does not report the PCIe generation", gpu)
    value = f"gen{link.generation} of gen{link.generation_max}"
    if link.generation >= link.generation_max:
        return Check(
            "pcie_degraded.generation", "pass", value, f"gen{link.generation_max}", gpu=gpu
        )
    utilization = device.utilization_ratio()
    if utilization is None or utilization < busy_ratio:
        # DCGM's PCIe plugin judges the link only in P0: an idle GPU trains down to save power.
        return skipped("pcie_degraded.generation", f"{value} while idle; --probe reads it", gpu)
    return Check(
        "pcie_degraded.generation",
        "fail",
        value + " while busy",
        f"gen{link.generation_max}",
        f"set the slot to Auto/Gen{link.generation_max} in the BIOS; reseat the card",
        gpu,
    )


def pcie_slot(device: GpuDevice, config: DeviceConfig | None) -> Check:
    link = device.pcie_link()
    gpu = _gpu(device)
    own = None if config is None else config.pcie_generation_gpu_max
    if link is None or link.generation_max is None or own is None:
        return skipped("pcie_degraded.slot", "NVML does not report the GPU's own PCIe maximum", gpu)
    value = f"slot gen{link.generation_max}, GPU gen{own}"
    if link.generation_max >= own:
        return Check("pcie_degraded.slot", "pass", value, f"gen{own}", gpu=gpu)
    return Check(
        "pcie_degraded.slot",
        "warn",
        value,
        f"gen{own}",
        f"the slot or riser holds the GPU at gen{link.generation_max}: use a gen{own} slot",
        gpu,
    )


def topology(first: GpuDevice, second: GpuDevice) -> Check:
    pair = f"{first.index},{second.index}"
    link = next((p.link for p in first.peers() if p.peer_index == second.index), None)
    if link is None:
        return skipped("interconnect.topology", "NVML cannot place this pair", pair)
    words, status = _TOPOLOGY[link], _TOPOLOGY_STATUS[link]
    fix = ""
    if status != "pass":
        fix = (
            "put both GPUs under one CPU socket's root complex (or bridge them with NVLink); "
            "else expect a slower all-reduce"
        )
    return Check(
        "interconnect.topology",
        status,
        words,
        "NVLink, a PCIe switch or one host bridge",
        fix,
        pair,
    )


def p2p(backend: GpuBackend, first: GpuDevice, second: GpuDevice) -> Check:
    pair = f"{first.index},{second.index}"
    statuses = backend.p2p_status(first.index, second.index)
    read, write = statuses.get("read"), statuses.get("write")
    if read is None and write is None:
        return skipped("interconnect.p2p", "NVML does not report P2P status", pair)
    value = ", ".join(f"{k} {v}" for k, v in statuses.items())
    if read == "ok" and write == "ok":
        return Check("interconnect.p2p", "pass", value, "read ok, write ok", gpu=pair)
    return Check(
        "interconnect.p2p",
        "warn",
        value,
        "read ok, write ok",
        "NCCL falls back to copies through host memory; on one socket, check ACS/IOMMU "
        "(iommu=pt, disable ACS in the BIOS)",
        pair,
    )


def numa(devices: Sequence[GpuDevice], configs: Mapping[int, DeviceConfig | None]) -> Check:
    nodes = {d.index: (c.numa_node if (c := configs[d.index]) else None) for d in devices}
    gpus = ",".join(str(d.index) for d in devices)
    if any(node is None for node in nodes.values()):
        return skipped("interconnect.numa", "NVML does not report the GPUs' NUMA nodes", gpus)
    value = "; ".join(f"GPU {i}: node {n}" for i, n in nodes.items())
    if len(set(nodes.values())) == 1:
        return Check("interconnect.numa", "pass", value, "one NUMA node", gpu=gpus)
    return Check(
        "interconnect.numa",
        "warn",
        value,
        "one NUMA node",
        "every all-reduce crosses the sockets' interconnect: move the cards under one socket",
        gpus,
    )


def cpu_affinity(device: GpuDevice, config: DeviceConfig | None, host: HostView) -> Check:
    gpu = _gpu(device)
    local = None if config is None else config.local_cpus
    if local is None:
        return skipped("interconnect.cpu_affinity", "NVML does not report CPU affinity", gpu)
    near = len(local & host.allowed_cpus)
    if host.simulated:
        value = f"{near} of the simulated host's {len(host.allowed_cpus)} CPUs are local to the GPU"
        if host.process is not None:
            value += f" (this process may use {host.process.words()} of this machine)"
    else:
        cpus = host.process or ProcessCpus(host.allowed_cpus)
        value = f"{near} of this process's {cpus.words()} are local to the GPU"
    if near:
        return Check("interconnect.cpu_affinity", "pass", value, "some local CPUs", gpu=gpu)
    return Check(
        "interconnect.cpu_affinity",
        "warn",
        value,
        "some local CPUs",
        "the process is pinned away from the GPU's NUMA node: numactl --cpunodebind=<node>",
        gpu,
    )


def nvlink(device: GpuDevice) -> Check:
    gpu = _gpu(device)
    links = device.nvlinks()
    if not links:
        return skipped("interconnect.nvlink", "no NVLink links", gpu)
    down = sorted(n for n, link in links.items() if not link.up)
    value = f"{len(links) - len(down)} of {len(links)} links up"
    if not down:
        return Check("interconnect.nvlink", "pass", value, f"{len(links)} up", gpu=gpu)
    return Check(
        "interconnect.nvlink",
        "fail",
        value + f" (down: {', '.join(map(str, down))})",
        f"{len(links)} up",
        "reseat the NVLink bridge; nvidia-smi nvlink -s shows each link",
        gpu,
    )


def persistence(device: GpuDevice, config: DeviceConfig | None) -> Check:
    gpu = _gpu(device)
    mode = None if config is None else config.persistence_mode
    if mode is None:
        return skipped("persistence_mode", "NVML does not report persistence mode", gpu)
    if mode:
        return Check("persistence_mode", "pass", "on", "on", gpu=gpu)
    return Check(
        "persistence_mode",
        "warn",
        "off",
        "on",
        f"sudo nvidia-smi -i {device.index} -pm 1 (or run nvidia-persistenced): the driver "
        "stays initialised between runs",
        gpu,
    )


def power_limit(device: GpuDevice, config: DeviceConfig | None) -> Check:
    gpu = _gpu(device)
    limit = device.power_limit_watts()
    default = None if config is None else config.power_limit_default_watts
    if limit is None or default is None:
        return skipped("power_capping.limit", "NVML does not report the power limits", gpu)
    value = f"{limit:.0f} W of {default:.0f} W default"
    if limit >= default * (1 - _POWER_LIMIT_SLACK_RATIO):
        return Check("power_capping.limit", "pass", value, f"{default:.0f} W", gpu=gpu)
    return Check(
        "power_capping.limit",
        "warn",
        value,
        f"{default:.0f} W",
        f"sudo nvidia-smi -i {device.index} -pl {default:.0f} (a capped GPU paces both)",
        gpu,
    )


def temperature(device: GpuDevice, host: HostView) -> Check:
    gpu = _gpu(device)
    now = device.temperature_celsius()
    slowdown = device.temperature_threshold_celsius("slowdown")
    if now is None or slowdown is None:
        return skipped("temperature_headroom.idle", "NVML does not report the temperatures", gpu)
    # The margin GpuTemperatureNearSlowdown fires at: a GPU this hot before the run starts
    # will throttle once it works.
    margin = host.thresholds.GpuTemperatureNearSlowdown.margin_celsius
    value = f"{now:.0f} °C, slowdown at {slowdown:.0f} °C"
    expected = f"below {slowdown - margin:.0f} °C"
    if now < slowdown - margin:
        return Check("temperature_headroom.idle", "pass", value, expected, gpu=gpu)
    return Check(
        "temperature_headroom.idle",
        "fail" if now >= slowdown else "warn",
        value,
        expected,
        "clean the heatsink, raise the fan curve or airflow; leave a slot between the cards",
        gpu,
    )


def _reasons_check(check_id: str, reasons: Sequence[str], fix: str) -> Callable[[GpuDevice], Check]:
    def check(device: GpuDevice) -> Check:
        gpu = _gpu(device)
        active = device.clocks_event_reasons()
        if active is None:
            return skipped(check_id, "NVML does not report clocks-event reasons", gpu)
        on = [r for r in reasons if active.get(r)]
        if not on:
            return Check(check_id, "pass", "none active", "none active", gpu=gpu)
        return Check(check_id, "warn", ", ".join(on) + " active", "none active", fix, gpu)

    return check


thermal_throttling = _reasons_check(
    "thermal_throttling.active", _THERMAL_REASONS, "cool the GPU before the run: airflow, fans"
)
hardware_slowdown = _reasons_check(
    "hardware_slowdown.active",
    _HARDWARE_REASONS,
    "check the power cables and the PSU's capacity (a power brake halves the clocks)",
)


# What gpu_error.ecc looks for, in the words of what it finds: each problem below is one of these.
_ECC_EXPECTED = "no uncorrected ECC errors and no pending page retirement or row remap"


def ecc(device: GpuDevice, config: DeviceConfig | None) -> Check:
    gpu = _gpu(device)
    if config is None or config.ecc_enabled is None:
        return skipped("gpu_error.ecc", "NVML does not report ECC", gpu)
    if not config.ecc_enabled:
        return Check("gpu_error.ecc", "pass", "ECC off", _ECC_EXPECTED, gpu=gpu)
    problems = []
    if config.retired_pages_pending:
        problems.append("retired pages pending")
    if config.remapped_rows_pending:
        problems.append("row remap pending")
    if config.remapped_rows_failed:
        problems.append("row remap failed")
    uncorrected = (device.ecc_errors_total() or {}).get("uncorrected", 0.0)
    if uncorrected:
        problems.append(f"{uncorrected:.0f} uncorrected ECC error{'' if uncorrected == 1 else 's'}")
    if not problems:
        return Check("gpu_error.ecc", "pass", "ECC on, clean", _ECC_EXPECTED, gpu=gpu)
    return Check(
        "gpu_error.ecc",
        "fail",
        ", ".join(problems),
        _ECC_EXPECTED,
        "reset the GPU (nvidia-smi -r) or reboot to apply pending retirements; a failed remap "
        "means RMA",
        gpu,
    )


def xid(device: GpuDevice, host: HostView, simulated: bool) -> Check:
    gpu = _gpu(device)
    if simulated:
        counts = device.xid_errors_total()
    elif host.xids is None:
        return skipped("gpu_error.xid", host.xids_unavailable, gpu)
    else:
        counts = host.xids.get(device.uuid, {})
    seen = {number: n for number, n in counts.items() if n > 0}
    if not seen:
        return Check("gpu_error.xid", "pass", "none", "none", gpu=gpu)
    critical = set(host.thresholds.GpuXidError.critical_xids)
    value = ", ".join(f"XID {n} x{count:.0f}" for n, count in sorted(seen.items()))
    return Check(
        "gpu_error.xid",
        "fail" if critical & set(seen) else "warn",
        value,
        "none",
        "look the XID up in NVIDIA's XID catalogue; the runbook's GpuXidError says what to do",
        gpu,
    )


def foreign(device: GpuDevice, host: HostView) -> Check:
    gpu = _gpu(device)
    reading = device.processes()
    if reading is None:
        return skipped("foreign_process.gpu", "NVML does not list processes", gpu)
    others = [p for p in reading.processes if p.pid != host.own_pid]
    if not others:
        return Check("foreign_process.gpu", "pass", "none", "none", gpu=gpu)
    value = ", ".join(
        f"pid {p.pid} {p.name or '?'}"
        + ("" if p.used_memory_bytes is None else f" {p.used_memory_bytes / 2**30:.1f} GiB")
        for p in others
    )
    return Check(
        "foreign_process.gpu",
        "warn",
        value,
        "none",
        "stop the other process (notebook kernels hold memory until closed) or use other GPUs",
        gpu,
    )


def mig(device: GpuDevice, config: DeviceConfig | None) -> Check:
    gpu = _gpu(device)
    mode = None if config is None else config.mig_enabled
    if mode is None:
        return skipped("mig.enabled", "the GPU has no MIG", gpu)
    if not mode:
        return Check("mig.enabled", "pass", "off", "off", gpu=gpu)
    return Check(
        "mig.enabled",
        "fail",
        "on",
        "off",
        f"sudo nvidia-smi -i {device.index} -mig 0: a process sees one MIG device, not two GPUs",
        gpu,
    )


def compute_mode(device: GpuDevice, config: DeviceConfig | None) -> Check:
    gpu = _gpu(device)
    mode = None if config is None else config.compute_mode
    if mode is None:
        return skipped("compute_mode", "NVML does not report the compute mode", gpu)
    if mode != "prohibited":
        return Check("compute_mode", "pass", mode, "default or exclusive_process", gpu=gpu)
    return Check(
        "compute_mode",
        "fail",
        mode,
        "default or exclusive_process",
        f"sudo nvidia-smi -i {device.index} -c DEFAULT",
        gpu,
    )


def precision(device: GpuDevice, config: DeviceConfig | None) -> Iterator[Check]:
    """mixed_float16 as Keras' own device_compatibility_check judges it (CC 7.0 and up);
    bfloat16 Tensor Cores from Ampere (CC 8.0)."""
    gpu = _gpu(device)
    capability = None if config is None else config.compute_capability
    if capability is None:
        yield skipped("precision.mixed_float16", "NVML does not report compute capability", gpu)
        yield skipped("precision.bfloat16", "NVML does not report compute capability", gpu)
        return
    for check_id, floor, fix in (
        ("precision.mixed_float16", (7, 0), "leave the float32 policy: no Tensor Cores below 7.0"),
        ("precision.bfloat16", (8, 0), "use mixed_float16 rather than mixed_bfloat16 here"),
    ):
        ok = capability >= floor
        yield Check(
            check_id,
            "pass" if ok else "warn",
            f"compute capability {_cc(config)}",
            "{}.{} or later".format(*floor),
            "" if ok else fix,
            gpu,
        )


# Every check below but the GPU count, skipped by name when NVML cannot start.
NEEDS_NVML = (
    "imbalance.model",
    "pcie_degraded.width",
    "pcie_degraded.generation",
    "pcie_degraded.slot",
    "interconnect.nvlink",
    "interconnect.cpu_affinity",
    "persistence_mode",
    "power_capping.limit",
    "temperature_headroom.idle",
    "thermal_throttling.active",
    "hardware_slowdown.active",
    "gpu_error.ecc",
    "gpu_error.xid",
    "foreign_process.gpu",
    "mig.enabled",
    "compute_mode",
    "precision.mixed_float16",
    "precision.bfloat16",
    "interconnect.numa",
    "interconnect.topology",
    "interconnect.p2p",
)

CHECK_IDS = ("nvml.gpus", "gpu_error.lost", *NEEDS_NVML)


def gpu_checks(backend: GpuBackend, host: HostView) -> list[Check]:
    """Every check the backend alone answers, GPU by GPU and pair by pair."""
    checks = [gpu_count(backend)]
    if not backend.status().up:
        return checks + [skipped(check_id, "needs NVML") for check_id in NEEDS_NVML]
    devices = list(backend.gpus())
    alive = [d for d in devices if d.alive()]
    for device in devices:
        if device not in alive:
            checks.append(
                Check(
                    "gpu_error.lost",
                    "fail",
                    "not answering",
                    "answering",
                    "the GPU fell off the bus: reseat it, check power; a reboot brings it back",
                    _gpu(device),
                )
            )
    if not alive:
        return checks
    configs = {d.index: d.config() for d in alive}
    simulated = backend.kind == "simulated"
    busy = host.thresholds.busy_utilization_ratio
    checks.append(same_model(alive))
    for device in alive:
        config = configs[device.index]
        checks += [
            pcie_width(device),
            pcie_generation(device, busy),
            pcie_slot(device, config),
            nvlink(device),
            cpu_affinity(device, config, host),
            persistence(device, config),
            power_limit(device, config),
            temperature(device, host),
            thermal_throttling(device),
            hardware_slowdown(device),
            ecc(device, config),
            xid(device, host, simulated),
            foreign(device, host),
            mig(device, config),
            compute_mode(device, config),
            *precision(device, config),
        ]
    if len(alive) >= 2:
        checks.append(numa(alive, configs))
        for first, second in itertools.combinations(alive, 2):
            checks += [topology(first, second), p2p(backend, first, second)]
    return checks
