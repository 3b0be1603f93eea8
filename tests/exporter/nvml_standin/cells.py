"""One matrix cell: the real exporter collectors over the stand-in of one branch, board, binding.

``run_cell`` starts ``NvmlBackend`` on a fresh nvidia-ml-py whose library is the stand-in,
scrapes every collector once through prometheus_client, and returns the samples, the log
records, the versions the session chose and the symbols and field ids it asked for.
``expected`` says, from the board's and branch's facts alone, what the scrape must hold.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mirrorwatch.exporter.collectors.registry import ExporterInfo, GpuMetrics
from mirrorwatch.exporter.nvml import NvmlBackend
from tests.exporter.nvml_standin import library
from tests.exporter.nvml_standin.bindings import load_binding, unload
from tests.exporter.nvml_standin.boards import Board, MigSlot
from tests.exporter.nvml_standin.branches import Branch, release

Labels = frozenset[tuple[str, str]]
Samples = dict[tuple[str, Labels], float]


@dataclass(frozen=True)
class Cell:
    branch: Branch
    board: Board
    binding: str

    @property
    def id(self) -> str:
        return f"{self.branch.name}-{self.board.name}-{self.binding}"


@dataclass(frozen=True)
class CellResult:
    samples: Samples
    records: tuple[logging.LogRecord, ...]
    resolved: dict[str, str]
    asked: frozenset[str]
    fields_asked: frozenset[int]
    standin: library.StandIn

    def values(self, name: str, **labels: str) -> list[float]:
        """Values of ``name`` whose labels include ``labels``."""
        want = set(labels.items())
        return [v for (n, ls), v in self.samples.items() if n == name and want <= ls]

    def families(self) -> set[str]:
        return {name for name, _ in self.samples}


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _captured() -> Iterator[_Records]:
    handler = _Records()
    logger = logging.getLogger("mirrorwatch")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def run_cell(cell: Cell) -> CellResult:
    nvml = load_binding(cell.binding)
    standin = library.StandIn(nvml, cell.branch, cell.board)
    nvml.nvmlLib = standin  # type: ignore[attr-defined]  # what CDLL("libnvidia-ml.so.1") would have returned
    backend = NvmlBackend(nvml=nvml, background=False)
    with _captured() as captured:
        try:
            backend.start()
            # The families as the /metrics route gets them; rendering adds nothing to check here.
            metrics = GpuMetrics(backend, ExporterInfo("0", run_ttl_seconds=300))
            families = list(metrics.collect())
            session = backend.session
            resolved = {} if session is None else session.resolved()
        finally:
            backend.shutdown()
            unload(nvml)
    samples: Samples = {}
    for family in families:
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return CellResult(
        samples=samples,
        records=tuple(captured.records),
        resolved=resolved,
        asked=frozenset(standin.asked),
        fields_asked=frozenset(standin.fields_asked),
        standin=standin,
    )


@dataclass(frozen=True)
class Expected:
    """What one GPU of a cell must publish, from the board's and branch's facts."""

    utilization: float | None
    memory_used: float
    memory_total: float
    fans: int
    ecc: bool
    pcie_bytes: bool
    nvlinks: int
    processes: dict[int, float | None]  # pid -> bytes (None: absent)
    mig_enabled: float | None
    mig: tuple[MigSlot, ...]


def expected(cell: Cell, gpu: int) -> Expected:
    board, branch = cell.board, cell.branch
    if board.mig_on:
        allocated = sum(slot.memory_used for slot in board.mig)
        processes: dict[int, float | None] = {pid: None for slot in board.mig for pid in slot.pids}
    else:
        # Allocated memory alone on every branch: _v2 from 510, v1 (allocated then) before.
        allocated = board.memory_allocated
        processes = {
            pid + 100 * gpu: None if used < 0 else float(used) for pid, used in board.processes
        }
    return Expected(
        utilization=None if board.mig_on else library.UTILIZATION[0] / 100,
        memory_used=float(allocated),
        memory_total=float(board.memory_total),
        fans=board.fans,
        ecc=board.ecc,
        # Byte counters are fields 197/198 from 555.42.02; before it the background sampler
        # integrates throughput (not run in a one-scrape cell).
        pcie_bytes=branch.release >= release("555.42.02"),
        nvlinks=board.nvlinks,
        processes=processes,
        mig_enabled=float(board.mig_on) if board.mig_capable else None,
        mig=board.mig,
    )
