"""mirrorwatch-doctor on the simulated host: what each built-in scenario's pre-flight finds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirrorwatch.doctor.cli import main
from tests.doctor.run import by_id, doctor_json
from tests.hang import HANG_SECONDS


def test_pcie_degraded_fails_naming_gpu_1_at_x8_of_x16(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor_json(capsys, "--simulate", "pcie-degraded")
    assert code == 1
    failed = [c for c in document["checks"] if c["status"] == "fail"]
    assert [(c["id"], c["gpu"], c["value"]) for c in failed] == [
        ("pcie_degraded.width", "1", "x8 of x16")
    ]
    assert failed[0]["expected"] == "x16"
    assert failed[0]["fix"]
    assert failed[0]["runbook"] == "docs/runbook.md#doctor-pcie_degradedwidth"


def test_healthy_passes_every_check_or_skips_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor_json(capsys, "--simulate", "healthy")
    assert code == 0
    assert {c["status"] for c in document["checks"]} <= {"pass", "skip"}
    assert document["summary"]["fail"] == document["summary"]["warn"] == 0
    assert document["summary"]["pass"] == sum(c["status"] == "pass" for c in document["checks"])
    assert document["expected_speedup"] is None


def test_cross_socket_warns_about_the_pair_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor_json(capsys, "--simulate", "cross-socket")
    assert code == 0
    warned = {c["id"]: c for c in document["checks"] if c["status"] == "warn"}
    assert set(warned) == {"interconnect.topology", "interconnect.numa", "interconnect.p2p"}
    assert warned["interconnect.topology"]["value"].startswith("SYS")
    assert warned["interconnect.topology"]["gpu"] == "0,1"
    assert warned["interconnect.numa"]["value"] == "GPU 0: node 0; GPU 1: node 1"


def test_the_simulated_host_is_read_after_its_last_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gpu-lost loses GPU 1 at 20 s: a pre-flight of that host finds it gone.
    code, document = doctor_json(capsys, "--simulate", "gpu-lost")
    assert code == 1
    assert [(c["gpu"], c["status"]) for c in by_id(document, "gpu_error.lost")] == [("1", "fail")]


def test_a_critical_xid_fails_and_names_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor_json(capsys, "--simulate", "xid")
    assert code == 1
    (gpu1,) = [c for c in by_id(document, "gpu_error.xid") if c["gpu"] == "1"]
    assert (gpu1["status"], gpu1["value"]) == ("fail", "XID 43 x1, XID 48 x1")
    (ecc,) = [c for c in by_id(document, "gpu_error.ecc") if c["gpu"] == "1"]
    assert (ecc["status"], ecc["value"]) == ("fail", "1 uncorrected ECC error")


def test_a_hot_gpu_fails_its_headroom_and_warns_of_thermal_throttling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, document = doctor_json(capsys, "--simulate", "thermal-throttle")
    assert code == 1
    statuses = {(c["id"], c["gpu"]): c["status"] for c in document["checks"]}
    assert statuses[("temperature_headroom.idle", "1")] == "fail"
    assert statuses[("thermal_throttling.active", "1")] == "warn"
    assert statuses[("temperature_headroom.idle", "0")] == "pass"


def test_a_foreign_process_is_named_with_its_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, document = doctor_json(capsys, "--simulate", "foreign-process")
    assert code == 0
    (gpu1,) = [c for c in by_id(document, "foreign_process.gpu") if c["gpu"] == "1"]
    assert (gpu1["status"], gpu1["value"]) == ("warn", "pid 4194817 python3 12.0 GiB")


def test_a_scenario_file_sets_what_the_settings_checks_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "host.yaml"
    path.write_text(
        "description: d\nexpected_alerts: []\ncuda_version: '12.2'\n"
        "gpus: {persistence_mode: false, compute_mode: prohibited,"
        " compute_capability: '6.1', power_limit_watts: 300, idle_power_watts: 30,"
        " mig: [{gpu: 1, gpu_instance: 1, profile: 7g.80gb, memory_gib: 80}]}\n"
        "events: [{type: power_cap, gpu: 0, at: 0, watts: 200}]\n"
    )
    code, document = doctor_json(capsys, "--simulate", str(path))
    assert code == 1
    statuses = {(c["id"], c["gpu"]): (c["status"], c["value"]) for c in document["checks"]}
    assert statuses[("persistence_mode", "0")] == ("warn", "off")
    assert statuses[("mig.enabled", "1")] == ("fail", "on")
    assert statuses[("compute_mode", "0")] == ("fail", "prohibited")
    assert statuses[("precision.mixed_float16", "0")] == ("warn", "compute capability 6.1")
    assert statuses[("power_capping.limit", "0")] == ("warn", "200 W of 300 W default")
    assert statuses[("power_capping.limit", "1")][0] == "pass"


def test_the_checklist_marks_each_check_and_says_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--simulate", "pcie-degraded"]) == 1
    out = capsys.readouterr().out
    assert "FAIL pcie_degraded.width [GPU 1]: x8 of x16" in out
    assert "fix: reseat the card" in out
    assert "\033[" not in out  # not a terminal: no colour
    assert out.rstrip().endswith("1 failed, 9 skipped")


def test_probe_without_tensorflow_is_skipped_saying_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The base install: `import tensorflow` fails, as mirrorwatch[trainer] is not there.
    monkeypatch.setattr("mirrorwatch.doctor.cli._tensorflow", lambda: None)
    code, document = doctor_json(capsys, "--simulate", "healthy", "--probe")
    assert code == 0
    (probe,) = by_id(document, "probe")
    assert (probe["status"], probe["value"]) == ("skip", "skipped: no TensorFlow")
    assert document["expected_speedup"] is None


def test_the_tensorflow_checks_a_simulated_host_skips_are_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--simulate", "healthy"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if "tensorflow" in line]
    assert lines == [
        "skip tensorflow.* (7 checks: cuda_build, gpus, cuda_versions, cudnn_loaded, driver, "
        "compute_capability, cross_device_ops): skipped: a simulated host: TensorFlow sees this "
        "machine's GPUs, not the simulated ones"
    ]
    # The JSON keeps each check: scripts read them by id.
    _, document = doctor_json(capsys, "--simulate", "healthy")
    assert len([c for c in document["checks"] if c["id"].startswith("tensorflow.")]) == 7


def test_the_cpus_are_this_process_s_under_a_restricted_affinity() -> None:
    # `taskset -c 0 mirrorwatch-doctor`: the process may use one CPU, whatever the host has.
    result = subprocess.run(
        [sys.executable, "-c", PINNED_DOCTOR],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (value,) = {c["value"] for c in json.loads(result.stdout)["checks"] if c["id"] == AFFINITY}
    assert value == (
        "32 of the simulated host's 32 CPUs are local to the GPU "
        "(this process may use 1 CPU of this machine)"
    )


AFFINITY = "interconnect.cpu_affinity"
PINNED_DOCTOR = (
    "import os, sys\n"
    "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
    "from mirrorwatch.doctor.cli import main\n"
    "sys.exit(main(['--simulate', 'healthy', '--json']))\n"
)
