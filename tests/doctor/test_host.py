"""This process's CPUs as the doctor counts them: its affinity and its cgroup's quota."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mirrorwatch.doctor.host import ProcessCpus, cgroup_cpu_quota
from tests.hang import HANG_SECONDS

PINNED = (
    "import json, os\n"
    "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    "from mirrorwatch.doctor.host import process_cpus\n"
    "cpus = process_cpus()\n"
    "print(json.dumps({'allowed': sorted(cpus.allowed), 'words': cpus.words()}))\n"
)


def test_a_restricted_affinity_is_what_the_process_counts() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PINNED],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    counted = json.loads(result.stdout)
    assert len(counted["allowed"]) == 1
    assert counted["words"].startswith("1 CPU")


def _cgroup(tmp_path: Path, quotas: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for folder, quota in quotas.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(quota + "\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/kubepods/pod/ctr\n")
    return root, own


def test_the_tightest_cgroup_quota_up_the_tree_counts(tmp_path: Path) -> None:
    root, own = _cgroup(
        tmp_path,
        {
            "kubepods": "400000 100000",
            "kubepods/pod": "150000 100000",
            "kubepods/pod/ctr": "max 100000",
        },
    )
    assert cgroup_cpu_quota(root, own) == 1.5


def test_no_quota_is_none(tmp_path: Path) -> None:
    root, own = _cgroup(tmp_path, {"kubepods/pod/ctr": "max 100000"})
    assert cgroup_cpu_quota(root, own) is None
    assert cgroup_cpu_quota(root, tmp_path / "absent") is None


def test_a_quota_below_the_cpus_is_said_beside_them() -> None:
    assert ProcessCpus(frozenset(range(4)), 1.5).words() == "4 CPUs (cgroup quota 1.5 CPUs)"
    assert ProcessCpus(frozenset(range(2)), 8.0).words() == "2 CPUs"
