"""The TensorFlow checks: does this TensorFlow see and use the GPUs NVML lists, and how well."""

from __future__ import annotations

import re
from collections.abc import Sequence

from mirrorwatch.doctor.model import Check, skipped
from mirrorwatch.doctor.strategy import mirrored_choice
from mirrorwatch.doctor.tf_facts import TfFacts
from mirrorwatch.exporter.backend import DeviceConfig

NO_TENSORFLOW = "no TensorFlow (pip install 'mirrorwatch[trainer]')"
SIMULATED = "a simulated host: TensorFlow sees this machine's GPUs, not the simulated ones"
# The driver each CUDA major release needs at least (CUDA Toolkit release notes, table 3:
# "CUDA minor version compatibility"): any 12.x runs on 525.60.13 or later.
_MINIMUM_DRIVER = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}
TF_CHECK_IDS = (
    "tensorflow.cuda_build",
    "tensorflow.gpus",
    "tensorflow.cuda_versions",
    "tensorflow.cudnn_loaded",
    "tensorflow.driver",
    "tensorflow.compute_capability",
    "tensorflow.cross_device_ops",
)


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    numbers = re.findall(r"\d+", text)
    return tuple(int(n) for n in numbers) or None


def cuda_build(facts: TfFacts) -> Check:
    if facts.is_cuda_build:
        return Check(
            "tensorflow.cuda_build",
            "pass",
            f"TensorFlow {facts.version}, CUDA build",
            "a CUDA build",
        )
    return Check(
        "tensorflow.cuda_build",
        "fail",
        f"TensorFlow {facts.version} without CUDA (a CPU-only build such as tensorflow-cpu)",
        "a CUDA build",
        "pip install 'tensorflow[and-cuda]' in place of tensorflow-cpu",
    )


def visible_gpus(facts: TfFacts, nvml_gpus: int | None) -> Check:
    seen = len(facts.gpus)
    visible = facts.cuda_visible_devices
    value = f"TensorFlow sees {seen} GPU" + ("" if seen == 1 else "s")
    if visible is not None:
        value += f" (CUDA_VISIBLE_DEVICES={visible!r})"
    expected = "2 GPUs or more" if nvml_gpus is None else f"{nvml_gpus} (as NVML)"
    if seen >= 2 and (nvml_gpus is None or seen >= nvml_gpus):
        return Check("tensorflow.gpus", "pass", value, expected)
    if not facts.is_cuda_build:
        reason = "this TensorFlow has no CUDA support"
        fix = "pip install 'tensorflow[and-cuda]'"
    elif visible is not None and seen < (nvml_gpus or 2):
        reason = "CUDA_VISIBLE_DEVICES hides GPUs"
        fix = "unset CUDA_VISIBLE_DEVICES or list every GPU in it"
    elif seen == 0:
        reason = "the CUDA libraries did not load (run with TF_CPP_MIN_LOG_LEVEL=0 to see which)"
        fix = "install the nvidia-*-cu12 wheels tensorflow[and-cuda] pulls, matching the driver"
    else:
        reason = "fewer GPUs than NVML lists"
        fix = "check CUDA_VISIBLE_DEVICES and TF_CPP_MIN_LOG_LEVEL=0's 'Ignoring visible gpu'"
    return Check("tensorflow.gpus", "fail", f"{value}: {reason}", expected, fix)


def cuda_versions(facts: TfFacts) -> Check:
    if not facts.is_cuda_build:
        return skipped("tensorflow.cuda_versions", "not a CUDA build")
    info = facts.build_info
    value = f"CUDA {info.get('cuda_version', '?')}, cuDNN {info.get('cudnn_version', '?')}"
    return Check("tensorflow.cuda_versions", "pass", value, "what the build names")


def cudnn_loaded(facts: TfFacts) -> Check:
    if not facts.is_cuda_build:
        return skipped("tensorflow.cudnn_loaded", "not a CUDA build")
    built = _version(str(facts.build_info.get("cudnn_version", "")))
    loaded = _version(facts.cudnn_loaded)
    if loaded is None:
        return skipped("tensorflow.cudnn_loaded", "no libcudnn loaded yet (--probe loads it)")
    expected = f"cuDNN {facts.build_info.get('cudnn_version')}"
    # cuda_dnn.cc: the loaded major must equal the build's and its minor be no older.
    if built is None or (loaded[0] == built[0] and loaded[1:2] >= built[1:2]):
        return Check("tensorflow.cudnn_loaded", "pass", f"cuDNN {facts.cudnn_loaded}", expected)
    return Check(
        "tensorflow.cudnn_loaded",
        "fail",
        f"cuDNN {facts.cudnn_loaded} loaded",
        expected,
        "another package (torch, jax) brought its own nvidia-cudnn: give TensorFlow its own venv",
    )


def driver(
    facts: TfFacts, driver_version: str | None, driver_cuda: tuple[int, int] | None
) -> Check:
    if not facts.is_cuda_build:
        return skipped("tensorflow.driver", "not a CUDA build")
    build = _version(str(facts.build_info.get("cuda_version", "")))
    if build is None or driver_cuda is None:
        return skipped("tensorflow.driver", "the driver's CUDA version is unknown")
    needed = _MINIMUM_DRIVER.get(build[0])
    have = _version(driver_version)
    value = f"driver {driver_version} (CUDA {driver_cuda[0]}.{driver_cuda[1]})"
    expected = f"CUDA {build[0]}.{build[1] if len(build) > 1 else 0}" + (
        "" if needed is None else f", driver ≥ {'.'.join(map(str, needed))}"
    )
    fix = "update the NVIDIA driver"
    if driver_cuda[0] < build[0] or (needed is not None and have is not None and have < needed):
        return Check("tensorflow.driver", "fail", value, expected, fix)
    if driver_cuda < (build[0], build[1] if len(build) > 1 else 0):
        # Minor-version compatibility runs it, but PTX from the newer toolkit cannot be JIT
        # compiled and XLA disables parallel compilation (nvptx_compiler.cc's warning).
        return Check("tensorflow.driver", "warn", value, expected, fix)
    return Check("tensorflow.driver", "pass", value, expected)


def compute_capability(facts: TfFacts, configs: Sequence[DeviceConfig | None]) -> list[Check]:
    if not facts.is_cuda_build:
        return [skipped("tensorflow.compute_capability", "not a CUDA build")]
    targets = [str(t) for t in facts.build_info.get("cuda_compute_capabilities", [])]
    if not targets:
        return [skipped("tensorflow.compute_capability", "the build lists no compute capabilities")]
    cubins = {_version(t) for t in targets if t.startswith("sm_")}
    ptx = [v for t in targets if t.startswith("compute_") and (v := _version(t)) is not None]
    capabilities = [g.compute_capability for g in facts.gpus] or [
        c.compute_capability for c in configs if c is not None
    ]
    checks = []
    for index, capability in enumerate(capabilities):
        if capability is None:
            continue
        code = (capability[0] * 10 + capability[1],)
        value = f"compute capability {capability[0]}.{capability[1]}"
        expected = "one of " + ", ".join(targets)
        if code in cubins:
            checks.append(
                Check("tensorflow.compute_capability", "pass", value, expected, gpu=str(index))
            )
        elif any(p <= code for p in ptx):
            checks.append(
                Check(
                    "tensorflow.compute_capability",
                    "warn",
                    value + ": kernels JIT-compiled from PTX (slow first epochs)",
                    expected,
                    "use a TensorFlow built for this GPU, or keep CUDA_CACHE_PATH between runs",
                    str(index),
                )
            )
        else:
            checks.append(
                Check(
                    "tensorflow.compute_capability",
                    "fail",
                    value + ": no kernels for it",
                    expected,
                    "install a TensorFlow release that supports this GPU",
                    str(index),
                )
            )
    return checks or [skipped("tensorflow.compute_capability", "no GPU's compute capability known")]


def cross_device_ops(facts: TfFacts) -> Check:
    choice = mirrored_choice(
        len(facts.gpus) and facts.logical_gpus, len(facts.gpus), facts.nccl_kernels
    )
    expected = "CollectiveAllReduce (NCCL)"
    if choice.why_not_nccl is None:
        return Check("tensorflow.cross_device_ops", "pass", choice.words, expected)
    return Check(
        "tensorflow.cross_device_ops",
        "fail" if not facts.gpus else "warn",
        f"{choice.words}: {choice.why_not_nccl}",
        expected,
        "give MirroredStrategy two physical GPUs"
        if facts.gpus
        else "make TensorFlow see the GPUs first",
    )


def skipped_tf_checks(why: str) -> list[Check]:
    return [skipped(check_id, why) for check_id in TF_CHECK_IDS]


def tf_checks(
    facts: TfFacts | None,
    *,
    nvml_gpus: int | None,
    configs: Sequence[DeviceConfig | None],
    driver_version: str | None,
    driver_cuda: tuple[int, int] | None,
) -> list[Check]:
    """Every TensorFlow check; each one skipped, saying so, without TensorFlow."""
    if facts is None:
        return skipped_tf_checks(NO_TENSORFLOW)
    return [
        cuda_build(facts),
        visible_gpus(facts, nvml_gpus),
        cuda_versions(facts),
        cudnn_loaded(facts),
        driver(facts, driver_version, driver_cuda),
        *compute_capability(facts, configs),
        cross_device_ops(facts),
    ]
