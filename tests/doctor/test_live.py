"""mirrorwatch-doctor as its own process: real TensorFlow (CPU-only here), real NVML loading
(no driver here), the probes over two logical CPU devices, and a live exporter's XIDs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mirrorwatch.doctor.gpu_checks import NEEDS_NVML
from mirrorwatch.doctor.host import exporter_xids
from mirrorwatch.exporter.simulate.backend import gpu_uuid
from tests.doctor.run import by_id, doctor_process
from tests.exporter.exporter_process import running_exporter
from tests.hang import HANG_SECONDS

HERE = Path(__file__).parent


def test_this_machine_without_a_driver_and_with_cpu_tensorflow() -> None:
    result = doctor_process("--json")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    (nvml,) = by_id(document, "nvml.gpus")
    assert nvml["status"] == "fail"
    assert "NVML" in nvml["value"]
    for check_id in NEEDS_NVML:
        assert {c["status"] for c in by_id(document, check_id)} == {"skip"}, check_id
    (gpus,) = by_id(document, "tensorflow.gpus")
    assert gpus["status"] == "fail"
    assert "TensorFlow sees 0 GPUs: this TensorFlow has no CUDA support" in gpus["value"]


def test_the_probes_run_over_two_logical_cpus_and_give_a_speedup() -> None:
    result = doctor_process(
        "--simulate", "healthy", "--probe", "--model", "cnn", "--batch-size", "8", "--json"
    )
    assert "Traceback" not in result.stderr
    document = json.loads(result.stdout)
    assert result.returncode == 0, [c for c in document["checks"] if c["status"] == "fail"]
    (allreduce,) = by_id(document, "interconnect.allreduce")
    assert allreduce["status"] == "pass"
    assert "2 replicas" in allreduce["value"]
    assert len(by_id(document, "probe.copy_bandwidth")) == 2
    (matmul,) = by_id(document, "imbalance.matmul")
    assert "TFLOP/s" in matmul["value"]
    speedup = document["expected_speedup"]
    assert speedup["replicas"] == 2
    assert 0 < speedup["factor"] <= 2
    assert speedup["gradient_bytes"] > 0
    assert speedup["text"].startswith("expect about")


def test_the_replayed_choice_is_mirrored_strategy_s_own() -> None:
    result = subprocess.run(
        [sys.executable, str(HERE / "mirrored_choice.py")],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["replicas"] == 2
    assert answer["replay"] == answer["tensorflow"]


def test_xids_come_from_a_running_exporter_by_gpu_uuid(tmp_path: Path) -> None:
    scenario = tmp_path / "xid-now.yaml"
    scenario.write_text(
        "seed: 3\nexpected_alerts: []\nevents: [{type: xid, gpu: 1, at: 0s, xid: 79}]\n"
    )
    with running_exporter(["--simulate", str(scenario)]) as exporter:
        counts = exporter_xids(exporter.url)
    assert counts[gpu_uuid(3, 1)] == {79: 1.0}
    assert counts[gpu_uuid(3, 0)] == {}


def test_an_unreachable_exporter_skips_the_xid_check_saying_so(tmp_path: Path) -> None:
    result = doctor_process("--simulate", "healthy", "--exporter", "http://127.0.0.1:9", "--json")
    document = json.loads(result.stdout)
    # The simulated host reports its own XIDs: the exporter is not needed there.
    assert {c["status"] for c in by_id(document, "gpu_error.xid")} == {"pass"}


def test_bad_usage_is_one_line_and_exit_2() -> None:
    for args, named in (
        (["--simulate", "no-such-scenario"], "no-such-scenario"),
        (["--model", "cnn"], "--probe"),
        (["--gpus", "3"], "--simulate"),
        (["--probe", "--model", "nope"], "--model"),
        (["--probe", "--gradient-bytes", "-5"], "--gradient-bytes"),
    ):
        result = doctor_process(*args)
        assert result.returncode == 2, args
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (args, lines)
        assert named in lines[0], (args, lines)


def test_the_probe_says_what_it_does_and_stops_at_its_cap_with_a_partial_answer() -> None:
    result = doctor_process(
        "--simulate", "healthy", "--probe", "--model", "cnn", "--batch-size", "8",
        "--probe-seconds", "0.01", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = "\n".join(
        line for line in result.stderr.splitlines() if line.startswith("mirrorwatch-doctor: ")
    )
    # Its cost up front, then what it does as it goes, and what the cap left out.
    assert "at most about 0.01 s (--probe-seconds), then it stops with what it has" in said
    assert "cnn: 30.7 KiB of gradients" in said
    assert "host↔device copies: skipped, the --probe-seconds cap is reached" in said
    document = json.loads(result.stdout)
    (copies,) = {c["status"] for c in by_id(document, "probe.copy_bandwidth")}
    assert copies == "skip"
    # The step was cut off; the all-reduce of the model's gradients still gives its cost.
    speedup = document["expected_speedup"]
    assert speedup["partial"] == "partial: no step of cnn finished within the --probe-seconds cap"
    assert speedup["factor"] is None
    assert speedup["gradient_bytes"] == 31_400  # 7,850 float32 parameters
    assert speedup["text"].endswith(f"({speedup['partial']})")
