"""scripts/gpu_train_smoke.py, rehearsed on CPU replicas against a simulated exporter.

The script's real run needs a GPU host (scripts/gpu-smoke.sh runs it there); this rehearsal
checks everything but the GPU: the fit, the pushes, the replica_info/UUID check and the
series checks, so a lent GPU machine's minutes are not spent finding a bug in the script.
"""

from __future__ import annotations

import os
import subprocess
import sys

from demo.stack import REPO
from mirrorwatch.exporter.simulate.backend import pci_bus_id
from tests.exporter.exporter_process import running_exporter
from tests.hang import HANG_SECONDS

SCRIPT = REPO / "scripts" / "gpu_train_smoke.py"


def rehearse(bus_ids: str) -> subprocess.CompletedProcess[str]:
    with running_exporter(["--simulate", "healthy", "--log-level", "warning"]) as exporter:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MIRRORWATCH_")}
        env.update(TF_CPP_MIN_LOG_LEVEL="2", MIRRORWATCH_REPLICA_PCI_BUS_IDS=bus_ids)
        return subprocess.run(
            [
                sys.executable,
                SCRIPT,
                "--exporter",
                exporter.url,
                "--device",
                "CPU",
                "--seconds",
                "5",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
        )


def test_both_replicas_of_gpu_0_are_found_with_its_uuid() -> None:
    result = rehearse(f"{pci_bus_id(0)},{pci_bus_id(0)}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "gpu-train-smoke: OK" in result.stdout


def test_replicas_on_another_gpu_fail_the_uuid_check() -> None:
    result = rehearse(f"{pci_bus_id(0)},{pci_bus_id(1)}")
    assert result.returncode == 1
    assert "replica_info does not carry GPU 0's NVML UUID" in result.stderr
