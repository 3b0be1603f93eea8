"""The TensorFlow checks on TensorFlow's facts: build, driver, compute capability, NCCL."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from mirrorwatch.doctor.strategy import mirrored_choice
from mirrorwatch.doctor.tf_checks import (
    compute_capability,
    cross_device_ops,
    cudnn_loaded,
    driver,
    tf_checks,
    visible_gpus,
)
from mirrorwatch.doctor.tf_facts import TfFacts, TfGpu, loaded_cudnn

CUDA_BUILD: dict[str, Any] = {
    "is_cuda_build": True,
    "cuda_version": "12.5.1",
    "cudnn_version": "9",
    "cuda_compute_capabilities": ["sm_60", "sm_70", "sm_80", "sm_89", "compute_90"],
}


def facts(**changes: Any) -> TfFacts:
    base = TfFacts(
        version="2.20.0",
        build_info=CUDA_BUILD,
        gpus=[TfGpu("NVIDIA RTX A5000", (8, 6)), TfGpu("NVIDIA RTX A5000", (8, 6))],
        logical_gpus=2,
        nccl_kernels=True,
        cudnn_loaded="9.3.0",
    )
    return replace(base, **changes)


def test_a_gpu_whose_kernels_the_build_lacks_is_jit_compiled_from_ptx() -> None:
    (check, _) = compute_capability(facts(gpus=[TfGpu("H100", (9, 0))] * 2), [])
    assert check.status == "warn"
    assert "PTX" in check.value


def test_a_gpu_the_build_has_kernels_for_passes() -> None:
    checks = compute_capability(facts(gpus=[TfGpu("L4", (8, 9))] * 2), [])
    assert [c.status for c in checks] == ["pass", "pass"]


def test_a_gpu_older_than_every_target_fails() -> None:
    (check,) = compute_capability(facts(gpus=[TfGpu("K80", (3, 7))]), [])
    assert check.status == "fail"


def test_cuda_12_needs_driver_525_60_13_and_a_cuda_12_driver() -> None:
    assert driver(facts(), "550.54.15", (12, 4)).status == "warn"  # 12.4 < the build's 12.5
    assert driver(facts(), "560.28.03", (12, 6)).status == "pass"
    assert driver(facts(), "520.61.05", (11, 8)).status == "fail"
    assert driver(facts(), "525.60.12", (12, 0)).status == "fail"


def test_the_cudnn_that_loads_must_match_the_build_s_major() -> None:
    assert cudnn_loaded(facts(cudnn_loaded="9.1.0")).status == "pass"
    assert cudnn_loaded(facts(cudnn_loaded="8.9.7")).status == "fail"
    assert cudnn_loaded(facts(cudnn_loaded=None)).status == "skip"


def test_the_loaded_cudnn_is_read_from_the_process_s_mappings(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 0 08:01 1 /venv/nvidia/cudnn/lib/libcudnn.so.9\n"
        "7f02-7f03 r-xp 0 08:01 2 /venv/nvidia/cudnn/lib/libcudnn.so.9.3.0\n"
    )
    assert loaded_cudnn(maps) == "9.3.0"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
    assert loaded_cudnn(maps) is None


def test_cuda_visible_devices_hiding_a_gpu_is_named() -> None:
    check = visible_gpus(facts(gpus=[TfGpu("A5000", (8, 6))], cuda_visible_devices="0"), 2)
    assert check.status == "fail"
    assert "CUDA_VISIBLE_DEVICES" in check.value


def test_two_physical_gpus_get_nccl_and_a_split_gpu_gets_ring() -> None:
    assert cross_device_ops(facts()).status == "pass"
    split = cross_device_ops(facts(gpus=[TfGpu("A5000", (8, 6))], logical_gpus=2))
    assert split.status == "warn"
    assert "RING" in split.value
    assert mirrored_choice(2, 2, nccl_in_build=False).why_not_nccl is not None


def test_a_cpu_only_tensorflow_fails_saying_why() -> None:
    cpu = facts(build_info={"is_cuda_build": False}, gpus=[], logical_gpus=0, cudnn_loaded=None)
    checks = {
        c.id: c
        for c in tf_checks(cpu, nvml_gpus=None, configs=[], driver_version=None, driver_cuda=None)
    }
    assert checks["tensorflow.cuda_build"].status == "fail"
    assert checks["tensorflow.gpus"].status == "fail"
    assert "no CUDA support" in checks["tensorflow.gpus"].value
    assert checks["tensorflow.cross_device_ops"].status == "fail"


def test_without_tensorflow_every_tensorflow_check_says_so() -> None:
    checks = tf_checks(None, nvml_gpus=2, configs=[], driver_version=None, driver_cuda=None)
    assert {c.status for c in checks} == {"skip"}
    assert all("no TensorFlow" in c.value for c in checks)
