"""PCIe bytes for GPUs without PCIe byte-counter fields: sampled throughput, integrated.

nvmlDeviceGetPcieThroughput blocks ~20 ms per direction, so only the background thread samples
it; scrapes read the totals under their own lock. The totals belong to the backend and survive
an NVML re-init; the sampler belongs to one session and stops asking a GPU that cannot answer.
A GPU's first sample in a session, and its first after it was lost, only restarts its clock:
nothing is known of the traffic while it was not sampled, so none is invented for that time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mirrorwatch.exporter.nvml.session import GpuHandle, NvmlSession

BYTES_PER_KIB = 1024.0


@dataclass
class _PcieSum:
    at_s: float
    transmit_bytes: float = 0.0
    receive_bytes: float = 0.0


class PcieTotals:
    """Cumulative PCIe bytes integrated from periodic throughput samples, per GPU UUID.

    Each sample is a rate (bytes per second) measured just now; it is taken to hold since the
    previous sample. The first sample only starts the clock, so totals begin at 0.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: dict[str, _PcieSum] = {}

    def add_sample(
        self,
        uuid: str,
        transmit_bytes_per_s: float,
        receive_bytes_per_s: float,
        at_s: float,
        *,
        restart: bool = False,
    ) -> None:
        """Integrate one sample; with ``restart``, it only restarts the clock (totals kept)."""
        with self._lock:
            total = self._sums.get(uuid)
            if total is None:
                self._sums[uuid] = _PcieSum(at_s=at_s)
                return
            if restart:
                total.at_s = at_s
                return
            elapsed_s = max(at_s - total.at_s, 0.0)
            total.transmit_bytes += transmit_bytes_per_s * elapsed_s
            total.receive_bytes += receive_bytes_per_s * elapsed_s
            total.at_s = at_s

    def for_gpu(self, uuid: str) -> tuple[float, float] | None:
        with self._lock:
            total = self._sums.get(uuid)
            return None if total is None else (total.transmit_bytes, total.receive_bytes)


class PcieSampler:
    """One session's throughput sampling of the GPUs given, into the backend's totals."""

    def __init__(
        self,
        session: NvmlSession,
        gpus: Iterable[GpuHandle],
        totals: PcieTotals,
        clock: Callable[[], float],
    ) -> None:
        self._session = session
        self._totals = totals
        self._clock = clock
        self._lock = threading.Lock()
        self._sampled = {gpu.index: gpu for gpu in gpus}
        self._restart = set(self._sampled)  # GPUs whose next sample only restarts the clock

    @property
    def sampling(self) -> bool:
        """Some GPU is still sampled (none: the background thread need not wake for it)."""
        with self._lock:
            return bool(self._sampled)

    def sample(self) -> None:
        """Add one throughput sample (KB/s, which NVML means as KiB/s) per sampled GPU."""
        session = self._session
        tx_counter = session.constant("NVML_PCIE_UTIL_TX_BYTES")
        rx_counter = session.constant("NVML_PCIE_UTIL_RX_BYTES")
        with self._lock:
            gpus = list(self._sampled.values())
        for gpu in gpus:
            tx_kib_s = session.call(gpu, "nvmlDeviceGetPcieThroughput", tx_counter)
            rx_kib_s = session.call(gpu, "nvmlDeviceGetPcieThroughput", rx_counter)
            if session.is_lost(gpu):
                # Lost is not unsupported: sample it again once it answers (see recovery).
                self._restart.add(gpu.index)
                continue
            if tx_kib_s is None or rx_kib_s is None:
                # Unsupported or forbidden does not change while the GPU lives: stop asking it.
                with self._lock:
                    self._sampled.pop(gpu.index, None)
                continue
            restart = gpu.index in self._restart
            self._restart.discard(gpu.index)
            self._totals.add_sample(
                gpu.uuid,
                float(tx_kib_s) * BYTES_PER_KIB,
                float(rx_kib_s) * BYTES_PER_KIB,
                self._clock(),
                restart=restart,
            )

    def bytes_total(self, gpu: GpuHandle) -> tuple[float, float] | None:
        """Cumulative (transmit, receive) bytes of ``gpu``; None while it is not sampled."""
        with self._lock:
            if gpu.index not in self._sampled:
                return None
        return self._totals.for_gpu(gpu.uuid)
