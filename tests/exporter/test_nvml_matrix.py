"""Every driver branch x board x nvidia-ml-py cell: the exporter's scrape over the stand-in.

Each cell runs the real collectors over the real nvidia-ml-py (the lowest release
pyproject.toml accepts and the installed one) whose library is the stand-in of that branch's
nvml.h on that class of board (tests/exporter/nvml_standin). docs/compatibility.md is written
from these same cells (``python -m tests.exporter.nvml_standin.compatibility``).
"""

from __future__ import annotations

import ctypes
import functools
import logging

import pytest

from mirrorwatch.exporter.nvml.versions import MAX_FIELD_ID, SYMBOLS
from tests.exporter.nvml_standin import compatibility
from tests.exporter.nvml_standin.bindings import BINDINGS, LOWEST, load_binding, unload
from tests.exporter.nvml_standin.boards import BOARDS
from tests.exporter.nvml_standin.branches import BRANCHES
from tests.exporter.nvml_standin.cells import Cell, CellResult, expected, run_cell
from tests.exporter.nvml_standin.library import StandIn

CELLS = [
    Cell(branch, board, binding) for branch in BRANCHES for board in BOARDS for binding in BINDINGS
]


@functools.cache
def result(cell: Cell) -> CellResult:
    return run_cell(cell)


@pytest.mark.parametrize("cell", CELLS, ids=[cell.id for cell in CELLS])
def test_every_cell_scrapes_without_an_error_or_a_failed_collector(cell: Cell) -> None:
    got = result(cell)
    assert [r.getMessage() for r in got.records if r.levelno >= logging.ERROR] == []
    failed = got.values("mirrorwatch_exporter_collector_success")
    assert failed
    assert all(value == 1.0 for value in failed)
    assert got.values("mirrorwatch_up") == [1.0]
    assert got.values("mirrorwatch_gpu_up") == [1.0] * cell.board.gpus


@pytest.mark.parametrize("cell", CELLS, ids=[cell.id for cell in CELLS])
def test_every_cell_publishes_what_the_board_supports_with_its_value_and_nothing_else(
    cell: Cell,
) -> None:
    got = result(cell)
    for gpu in range(cell.board.gpus):
        want = expected(cell, gpu)
        at = {"gpu": str(gpu)}
        utilization = got.values("mirrorwatch_gpu_utilization_ratio", **at)
        assert utilization == ([] if want.utilization is None else [want.utilization])
        assert got.values("mirrorwatch_gpu_memory_used_bytes", **at) == [want.memory_used]
        assert got.values("mirrorwatch_gpu_memory_total_bytes", **at) == [want.memory_total]
        fans = got.values("mirrorwatch_gpu_fan_speed_ratio", **at)
        # Before 510 there is no fan count: the first fan alone is read.
        fan_count = min(want.fans, 1) if cell.branch.release < (510,) else want.fans
        assert fans == [0.37] * fan_count
        ecc = got.values("mirrorwatch_gpu_ecc_errors_total", **at)
        assert ecc == ([0.0, 0.0] if want.ecc else [])
        assert len(got.values("mirrorwatch_gpu_pcie_transmit_bytes_total", **at)) == int(
            want.pcie_bytes
        )
        assert len(got.values("mirrorwatch_gpu_nvlink_up", **at)) == want.nvlinks
        assert got.values("mirrorwatch_gpu_energy_joules_total", **at) == [123456.789]
        active = got.values("mirrorwatch_gpu_clocks_event_active", reason="sw_power_cap", **at)
        assert active == [1.0]
        memory = {
            int(dict(labels)["pid"]): value
            for (name, labels), value in got.samples.items()
            if name == "mirrorwatch_gpu_process_memory_used_bytes" and ("gpu", str(gpu)) in labels
        }
        assert memory == {pid: used for pid, used in want.processes.items() if used is not None}
        counted = got.values("mirrorwatch_gpu_processes", type="compute", **at)
        assert counted == [float(len(want.processes))]
        enabled = got.values("mirrorwatch_gpu_mig_enabled", **at)
        assert enabled == ([] if want.mig_enabled is None else [want.mig_enabled])
        for slot in want.mig:
            ids = {"gpu_instance": str(slot.gpu_instance), "compute_instance": "0", **at}
            info = got.values("mirrorwatch_gpu_mig_info", profile=slot.profile, **ids)
            assert info == [1.0]
            assert got.values("mirrorwatch_gpu_mig_memory_used_bytes", **ids) == [
                float(slot.memory_used)
            ]
            assert got.values("mirrorwatch_gpu_mig_memory_total_bytes", **ids) == [
                float(slot.memory_total)
            ]
            assert got.values("mirrorwatch_gpu_mig_processes", **ids) == [float(len(slot.pids))]
        assert len(got.values("mirrorwatch_gpu_mig_info", **at)) == len(want.mig)


@pytest.mark.parametrize("cell", CELLS, ids=[cell.id for cell in CELLS])
def test_every_cell_asks_only_known_symbols_and_field_ids_below_199(cell: Cell) -> None:
    got = result(cell)
    # nvmlInit_v2 is what the lowest binding's nvmlInit calls; newer ones call WithFlags.
    assert got.asked - {"nvmlInit_v2"} <= set(SYMBOLS)
    assert got.fields_asked
    assert max(got.fields_asked) <= MAX_FIELD_ID


def test_on_r470_each_gpu_lists_its_compute_processes_with_pid_and_memory() -> None:
    cell = Cell(BRANCHES[0], BOARDS[0], LOWEST)
    got = result(cell)
    assert cell.branch.name == "R470"
    assert got.resolved["compute_processes"] == "nvmlDeviceGetComputeRunningProcesses_v2"
    for gpu in range(2):
        assert got.values(
            "mirrorwatch_gpu_process_memory_used_bytes", gpu=str(gpu), pid=str(4242 + 100 * gpu)
        ) == [3.0 * 2**30]


def test_on_the_mig_standin_both_sparse_instances_are_published_and_parent_utilization_absent() -> (
    None
):
    board = next(b for b in BOARDS if b.mig_on)
    got = result(Cell(BRANCHES[-1], board, BINDINGS[-1]))
    assert [slot.index for slot in board.mig] == [0, 2]  # index 1 answers NOT_FOUND
    assert sorted(got.values("mirrorwatch_gpu_mig_memory_total_bytes", gpu="0")) == [
        20 * 2**30,
        40 * 2**30,
    ]
    assert got.values("mirrorwatch_gpu_utilization_ratio") == []
    assert got.values("mirrorwatch_gpu_memory_utilization_ratio") == []


def _scrambled_by_the_binding(branch_index: int, binding: str) -> list[int]:
    """The pids nvidia-ml-py's own _v3 wrapper reads from the stand-in of that branch."""
    nvml = load_binding(binding)
    try:
        standin = StandIn(nvml, BRANCHES[branch_index], BOARDS[2])
        nvml.nvmlLib = standin  # type: ignore[attr-defined]
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        return [int(p.pid) for p in nvml.nvmlDeviceGetComputeRunningProcesses_v3(handle)]
    finally:
        unload(nvml)


@pytest.mark.parametrize(
    ("branch_index", "entry_bytes"), [(1, 32), (3, 24)], ids=["535.54-32-byte", "535.104-24-byte"]
)
def test_the_process_struct_is_chosen_by_the_library_whatever_the_binding_reads(
    branch_index: int, entry_bytes: int
) -> None:
    branch = BRANCHES[branch_index]
    assert branch.v3_entry_bytes == entry_bytes
    right = [4242, 4343]
    # The binding whose _v3 struct differs from what this library writes scrambles the pids
    # (12.535.77 reads 32 bytes, 12.535.108 and later 24): the stand-in is faithful to that.
    for binding in BINDINGS:
        reads = ctypes.sizeof(load_binding(binding).c_nvmlProcessInfo_t)
        pids = _scrambled_by_the_binding(branch_index, binding)
        assert (pids[:2] == right) == (reads == entry_bytes)
        # The exporter reads the right pids with either binding.
        got = result(Cell(branch, BOARDS[2], binding))
        assert got.resolved["compute_processes"].endswith("_v3")
        listed = {
            int(dict(labels)["pid"])
            for (name, labels), _ in got.samples.items()
            if name == "mirrorwatch_gpu_process_memory_used_bytes" and ("gpu", "0") in labels
        }
        assert listed == set(right)


def test_the_compatibility_document_is_written_from_these_cells() -> None:
    assert compatibility.render(
        [(cell, result(cell)) for cell in CELLS]
    ) == compatibility.DOCUMENT.read_text(encoding="utf-8"), (
        "docs/compatibility.md is stale: python -m tests.exporter.nvml_standin.compatibility"
    )
