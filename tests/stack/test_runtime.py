"""The compose stack at run time, as Docker would run it, without a Docker engine.

Each locally built image is reproduced from its Dockerfile (tests/stack/images.py); each
service's process, healthcheck and network addresses are worked out by Docker's and Compose's
own rules (tests/stack/services.py cites them). Then: every service's program exists in what
its image installs and starts there; every healthcheck asks that service's own port, and
passes against the running service where this machine can run it; every scrape target and
Alertmanager receiver names a service (or alias) and the port it listens on.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from demo.stack import REPO
from tests.hang import HANG_SECONDS
from tests.ports import free_port
from tests.stack import dockerfile, images
from tests.stack import services as stack
from tests.stack.compose import bind_mounts, host_path, resolved_config

# Services whose process cannot start its real work on a machine without a GPU: they run here
# only to show the program exists and refuses cleanly.
NEEDS_GPU = {"exporter", "trainer"}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved_config(tmp_path_factory.mktemp("compose"))


@pytest.fixture(scope="module")
def image_bins(config: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Service name -> bin folder of its image's installation (one per distinct install)."""
    installed: dict[tuple[str, ...], Path] = {}
    bins = {}
    for name, service in config["services"].items():
        image = stack.image_of(service)
        if image is None:
            continue
        requirements = dockerfile.pip_requirements(image)
        key = tuple(images.substitute(r) for rs in requirements for r in rs)
        if key not in installed:
            installed[key] = images.install(
                image, Path(service["build"]["context"]), tmp_path_factory.mktemp("image")
            )
        bins[name] = installed[key]
    return bins


def rebind(words: list[str], port: int) -> list[str]:
    """A command line with its listen address moved to 127.0.0.1:port (a container has its own
    network namespace; this machine shares one, so each service gets a free port)."""
    out = []
    for word in words:
        if "0.0.0.0:" in word or "127.0.0.1:" in word:
            word = word.rsplit(":", 1)[0].replace("0.0.0.0", "127.0.0.1") + f":{port}"
        out.append(word)
    return out


def container_environment(service: dict[str, Any], bin_dir: Path) -> dict[str, str]:
    environment = {str(k): str(v) for k, v in (service.get("environment") or {}).items()}
    environment.pop("MIRRORWATCH_LISTEN", None)  # its flag beats it on every command line here
    return {
        **environment,
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(bin_dir.parent),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }


def working_dir(service: dict[str, Any], tmp: Path) -> Path:
    """The container's working directory, with the service's bind mounts laid out under it."""
    inside = service.get("working_dir")
    if not inside:
        return tmp
    prefix = inside.rstrip("/") + "/"
    mounts = [(s, t) for s, t, _ in bind_mounts(service) if t.startswith(prefix)]
    assert mounts, f"working_dir {inside} with nothing mounted under it"
    for source, target in mounts:
        link = tmp / target[len(prefix) :]
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(source)
    return tmp


@pytest.fixture
def started(
    request: pytest.FixtureRequest,
    config: dict[str, Any],
    image_bins: dict[str, Path],
    tmp_path: Path,
) -> Iterator[tuple[int, dict[str, Any], Path]]:
    """The named service's process running from its image, on a free loopback port."""
    name = request.param
    service = config["services"][name]
    port = free_port()
    words = rebind(stack.argv(service), port)
    process = subprocess.Popen(
        words,
        cwd=working_dir(service, tmp_path),
        env=container_environment(service, image_bins[name]),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        yield port, service, image_bins[name]
    finally:
        process.terminate()
        process.wait(timeout=20)


# --- programs ----------------------------------------------------------------------------


def test_every_locally_built_service_runs_a_program_its_image_installs(
    config: dict[str, Any], image_bins: dict[str, Path]
) -> None:
    for name in image_bins:
        program = stack.argv(config["services"][name])[0]
        assert (image_bins[name] / program).exists(), f"{name}: {program} is not in its image"


@pytest.mark.parametrize("name", ["exporter", "exporter-demo", "alert-log"])
def test_service_program_starts_from_its_image(
    config: dict[str, Any], image_bins: dict[str, Path], name: str, tmp_path: Path
) -> None:
    service = config["services"][name]
    result = subprocess.run(
        [*stack.argv(service), "--help"],
        cwd=working_dir(service, tmp_path),
        env=container_environment(service, image_bins[name]),
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def trainer_run(
    config: dict[str, Any], image_bins: dict[str, Path], name: str, tmp: Path
) -> subprocess.CompletedProcess[str]:
    """The trainer service's own command line, cut to two small steps."""
    service = config["services"][name]
    short = ["--steps=2", "--epochs=1", "--batch-size=8", "--image-size=8", "--model=cnn"]
    env = container_environment(service, image_bins[name])
    env["MIRRORWATCH_URL"] = f"http://127.0.0.1:{free_port()}"  # no exporter: pushes drop
    return subprocess.run(
        [*stack.argv(service), *short, f"--checkpoint-dir={tmp}"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )


def test_demo_trainer_trains_from_its_image(
    config: dict[str, Any], image_bins: dict[str, Path], tmp_path: Path
) -> None:
    result = trainer_run(config, image_bins, "trainer-demo", tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "on 2 replicas (/device:CPU:0, /device:CPU:1)" in result.stdout


def test_gpu_trainer_refuses_to_train_where_tensorflow_sees_no_gpu(
    config: dict[str, Any], image_bins: dict[str, Path], tmp_path: Path
) -> None:
    result = trainer_run(config, image_bins, "trainer", tmp_path)
    assert result.returncode == 2
    assert "--devices gpu: TensorFlow" in result.stderr.strip().splitlines()[-1]


def test_gpu_trainer_image_brings_the_cudnn_its_tensorflow_needs(config: dict[str, Any]) -> None:
    # TensorFlow's own wheel metadata (the and-cuda extra of this release, read from the
    # installed tensorflow-cpu of the same version) says which cuDNN it loads: 9.x since 2.18.
    image = local_image(config, "trainer")
    requirement = dockerfile.pip_requirements(image)[0][0]
    wanted = Requirement(requirement)
    assert wanted.name == "tensorflow", requirement
    assert wanted.extras == {"and-cuda"}, requirement
    (version,) = (s.version for s in wanted.specifier)
    assert importlib.metadata.version("tensorflow-cpu") == version, "test pin and image differ"
    cuda = [
        Requirement(r)
        for r in importlib.metadata.requires("tensorflow-cpu") or []
        if 'extra == "and-cuda"' in r
    ]
    (cudnn,) = (r for r in cuda if r.name == "nvidia-cudnn-cu12")
    # cuDNN 8.9 is what tensorflow/tensorflow:*-gpu ships (tensorflow/build#221): not enough.
    assert not cudnn.specifier.contains("8.9.7.29")
    assert cudnn.specifier.contains("9.3.0.75")
    # The base image's Python is one this TensorFlow supports.
    python = image.base_image.split(":")[1].split("-")[0]
    supported = importlib.metadata.metadata("tensorflow-cpu")["Requires-Python"]
    assert Version(python) in Requirement(f"tensorflow{supported}").specifier


def test_demo_trainer_image_installs_the_cpu_build_of_the_same_release(
    config: dict[str, Any],
) -> None:
    gpu = Requirement(dockerfile.pip_requirements(local_image(config, "trainer"))[0][0])
    cpu = Requirement(dockerfile.pip_requirements(local_image(config, "trainer-demo"))[0][0])
    assert cpu.name == "tensorflow-cpu"
    assert cpu.specifier == gpu.specifier


def local_image(config: dict[str, Any], name: str) -> dockerfile.Dockerfile:
    image = stack.image_of(config["services"][name])
    assert image is not None, f"{name} is not built locally"
    return image


# --- healthchecks ---------------------------------------------------------------------------


def test_every_healthcheck_asks_its_own_services_port(config: dict[str, Any]) -> None:
    for name, service in config["services"].items():
        check = stack.healthcheck(service)
        if check is None:
            continue
        urls = stack.urls_in(check)
        assert urls, f"{name}: healthcheck {check} asks no URL"
        for host, port in urls:
            assert host in ("127.0.0.1", "localhost"), f"{name}: healthcheck asks {host}"
            assert port == stack.listen_port(service), (
                f"{name}: healthcheck asks port {port}, the service listens on "
                f"{stack.listen_port(service)}"
            )


def test_every_long_running_service_has_a_healthcheck(config: dict[str, Any]) -> None:
    for name, service in config["services"].items():
        if service.get("restart") != "no":
            assert stack.healthcheck(service) is not None, name


@pytest.mark.parametrize("started", ["exporter-demo", "alert-log"], indirect=True)
def test_healthcheck_passes_against_the_running_service(
    started: tuple[int, dict[str, Any], Path],
) -> None:
    port, service, bin_dir = started
    check = stack.healthcheck(service) or []
    command = [word.replace(f":{stack.listen_port(service)}", f":{port}") for word in check]
    deadline = time.monotonic() + HANG_SECONDS
    while True:
        result = subprocess.run(
            command, env=container_environment(service, bin_dir), capture_output=True, timeout=10
        )
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.returncode == 0, result.stderr[-2000:]


# --- addresses between services -------------------------------------------------------------


def prometheus_targets(config: dict[str, Any]) -> list[str]:
    path = host_path(config["services"]["prometheus"], "/etc/prometheus/prometheus.yml")
    prometheus = yaml.safe_load(path.read_text(encoding="utf-8"))
    targets = [
        target
        for job in prometheus["scrape_configs"]
        for static in job.get("static_configs", [])
        for target in static["targets"]
    ]
    for alertmanagers in prometheus["alerting"]["alertmanagers"]:
        for static in alertmanagers["static_configs"]:
            targets.extend(static["targets"])
    return targets


def receiver_urls(config: dict[str, Any]) -> list[str]:
    path = host_path(config["services"]["alertmanager"], "/etc/alertmanager/alertmanager.yml")
    alertmanager = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        webhook["url"]
        for receiver in alertmanager["receivers"]
        for webhook in receiver.get("webhook_configs", [])
    ]


@pytest.mark.parametrize("profile", stack.PROFILES)
def test_every_scrape_and_alerting_target_is_a_service_port(
    config: dict[str, Any], profile: str
) -> None:
    running = stack.active(config, profile)
    targets = prometheus_targets(config)
    assert targets
    for target in targets:
        host, _, port = target.rpartition(":")
        # localhost inside the prometheus container is prometheus itself.
        name = "prometheus" if host == "localhost" else stack.resolve(running, host)
        assert int(port) == stack.listen_port(running[name]), f"{target} ({profile})"


@pytest.mark.parametrize("profile", stack.PROFILES)
def test_every_alertmanager_receiver_is_a_service_port(
    config: dict[str, Any], profile: str
) -> None:
    running = stack.active(config, profile)
    urls = receiver_urls(config)
    assert urls
    for host, port in stack.urls_in(urls):
        assert port == stack.listen_port(running[stack.resolve(running, host)]), host


def test_a_receiver_config_pointing_elsewhere_is_taken_from_the_setting(tmp_path: Path) -> None:
    example = REPO / "alerts" / "alertmanager.slack-email.example.yml"
    changed = resolved_config(tmp_path, ALERTMANAGER_CONFIG=str(example))
    mounted = host_path(changed["services"]["alertmanager"], "/etc/alertmanager/alertmanager.yml")
    assert os.path.samefile(mounted, example)


def test_doctor_service_reports_a_host_without_gpus_from_its_image(
    config: dict[str, Any], image_bins: dict[str, Path], tmp_path: Path
) -> None:
    # `docker compose run --rm doctor --json` on a host without a driver, from the trainer image.
    service = config["services"]["doctor"]
    result = subprocess.run(
        [*stack.argv(service), "--json"],
        cwd=tmp_path,
        env=container_environment(service, image_bins["doctor"]),
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    checks = {c["id"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["nvml.gpus"]["status"] == "fail"
    assert checks["tensorflow.gpus"]["status"] == "fail"
