"""Boards of the stand-in: what each class of GPU answers, per call and per field.

The classes follow nvml.h's support tiers and the reports collected for the project
(GeForce: "Limited Support", no ECC, no serial; passive datacenter boards: no fans; energy from
Volta; GPM from Hopper; MIG from Ampere; WSL2: WDDM, per-process memory not available and
process lists usually empty), and NVIDIA's own mock library's board profiles
(NVIDIA/k8s-test-infra pkg/gpu/mocknvml/configs: A100, H100, L40S, T4).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 2**30


@dataclass(frozen=True)
class MigSlot:
    """One MIG device at NVML index ``index`` of the parent (indices may be sparse)."""

    index: int
    gpu_instance: int
    compute_instance: int
    profile: str
    memory_total: int
    memory_used: int
    pids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Board:
    name: str  # the matrix's row
    product: str  # nvmlDeviceGetName
    memory_total: int
    memory_allocated: int
    memory_reserved: int
    nvlinks: int = 0
    ecc: bool = True
    serial: bool = True
    fans: int = 0  # 0: passively cooled, NVML answers NOT_SUPPORTED for fan speed
    energy: bool = True  # Volta and later
    gpm: bool = False  # Hopper and later
    mig: tuple[MigSlot, ...] = ()  # MIG on with these devices
    mig_capable: bool = False
    wsl: bool = False
    gpus: int = 2
    # Compute processes per GPU (pid, bytes; -1: not available); a MIG parent's come from
    # its slots.
    processes: tuple[tuple[int, int], ...] = ((4242, 3 * GIB), (4343, 1 * GIB))
    max_mig_devices: int = 7

    @property
    def mig_on(self) -> bool:
        return bool(self.mig)


BOARDS: tuple[Board, ...] = (
    Board(
        "H100 SXM (NVLink)",
        "NVIDIA H100 80GB HBM3",
        80 * GIB,
        30 * GIB,
        512 * 2**20,
        nvlinks=18,
        gpm=True,
        mig_capable=True,
    ),
    Board(
        "A100 (MIG on)",
        "NVIDIA A100-SXM4-80GB",
        80 * GIB,
        0,
        512 * 2**20,
        nvlinks=12,
        mig_capable=True,
        # Index 1 was destroyed and made again elsewhere: indices 0 and 2 answer, 1 does not.
        mig=(
            MigSlot(0, 1, 0, "3g.40gb", 40 * GIB, 25 * GIB, (5101,)),
            MigSlot(2, 5, 0, "2g.20gb", 20 * GIB, 6 * GIB, (5202,)),
        ),
        processes=(),
    ),
    Board("L40S (PCIe)", "NVIDIA L40S", 48 * GIB, 20 * GIB, 400 * 2**20),
    Board(
        "GeForce RTX 4090",
        "NVIDIA GeForce RTX 4090",
        24 * GIB,
        10 * GIB,
        300 * 2**20,
        ecc=False,
        serial=False,
        fans=2,
    ),
    Board("T4 (passive)", "Tesla T4", 16 * GIB, 8 * GIB, 250 * 2**20),
    Board("V100 SXM2", "Tesla V100-SXM2-32GB", 32 * GIB, 16 * GIB, 300 * 2**20, nvlinks=6),
    Board(
        "WSL2 guest",
        "NVIDIA GeForce RTX 4080 Laptop GPU",
        12 * GIB,
        4 * GIB,
        200 * 2**20,
        ecc=False,
        serial=False,
        fans=1,
        wsl=True,
        gpus=1,
        # WDDM: memory per process is NVML_VALUE_NOT_AVAILABLE (written -1 here).
        processes=((9001, -1),),
    ),
)
