"""scripts/gpu_features.py, rehearsed on the fake pynvml: what gpu-smoke.sh reports about
per-process utilisation and GPM support, NotSupported cases included."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from demo.stack import REPO
from tests.exporter.fake_pynvml import FakeGpu, FakeNvml, FakeProcess, FakeProcessSample


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_features", REPO / "scripts" / "gpu_features.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_hopper_with_samples_and_an_older_gpu_without_either() -> None:
    hopper = FakeGpu(
        name="NVIDIA H200",
        compute_processes=[FakeProcess(10, 2**30)],
        graphics_processes=[],
        process_samples=[FakeProcessSample(10, 5, 40)],
        gpm_supported=True,
    )
    older = FakeGpu(name="Tesla T4", gpm_supported=None)
    fake = FakeNvml([hopper, older])
    fake.nvmlInit()
    lines = script().probe(fake)
    text = "\n".join(lines)
    assert "GPU 0: NVIDIA H200" in text
    assert "compute processes: 1 process(es)" in lines[1]
    assert "per-process utilisation: supported, 1 sample(s)" in lines[3]
    assert "GPM: supported" in lines[4]
    assert "compute processes: NVML_ERROR_NOT_SUPPORTED" in lines[6]
    assert "per-process utilisation: not supported (NVML_ERROR_NOT_SUPPORTED)" in lines[8]
    assert "GPM: not supported (NVML_ERROR_NOT_SUPPORTED)" in lines[9]
    assert lines[-1] == "gpm-gpus: 0"


def test_no_sample_yet_still_counts_as_supported() -> None:
    fake = FakeNvml([FakeGpu(compute_processes=[], process_samples=[])])
    fake.nvmlInit()
    lines = script().probe(fake)
    assert any("supported, no sample yet" in line for line in lines)
    assert lines[-1] == "gpm-gpus: "


def test_without_nvml_it_says_so_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeNvml([])
    fake.init_error = fake.NVML_ERROR_LIBRARY_NOT_FOUND
    assert script().main(fake) == 2
    assert "NVML cannot start" in capsys.readouterr().err
