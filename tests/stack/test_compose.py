"""docker-compose.yml: valid for both validators, pinned, GPU-reserving, closed by default.

These checks are static: this machine has no Docker engine, so nothing here builds an image or
starts a container (the README says which steps need one).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from demo.stack import REPO
from mirrorwatch.exporter.simulate.backend import pci_bus_id
from tests.hang import HANG_SECONDS
from tests.stack import dockerfile
from tests.stack.compose import (
    COMPOSE_FILE,
    DEMO_SERVICES,
    ENV_EXAMPLE,
    GPU_SERVICES,
    SECRETS,
    bind_mounts,
    env_example,
    resolved_config,
    run_compose,
    tool,
    variables_used,
)

# Variables docker compose reads itself rather than interpolating into the file.
COMPOSE_SETTINGS = {"COMPOSE_PROFILES", "COMPOSE_PROJECT_NAME"}


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return resolved_config(tmp_path_factory.mktemp("compose"))


def services(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = config["services"]
    return result


def test_compose_file_matches_the_compose_spec_schema() -> None:
    check = tool("check-jsonschema", "install the test extra: `make install`")
    result = subprocess.run(
        [check, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_accepts_the_file_with_the_example_settings(tmp_path: Path) -> None:
    result = run_compose({**env_example(), **SECRETS}, tmp_path, "config", "-q")
    assert result.returncode == 0, result.stderr


def test_docker_compose_accepts_the_demo_profile(tmp_path: Path) -> None:
    env = {**env_example(), **SECRETS, "COMPOSE_PROFILES": "demo"}
    result = run_compose(env, tmp_path, "--profile", "demo", "config", "--services")
    assert result.returncode == 0, result.stderr
    assert set(DEMO_SERVICES) <= set(result.stdout.split())


@pytest.mark.parametrize("secret", sorted(SECRETS))
def test_stack_refuses_to_start_without_a_secret(tmp_path: Path, secret: str) -> None:
    env = {**env_example(), **SECRETS, secret: ""}
    result = run_compose(env, tmp_path, "config", "-q")
    assert result.returncode != 0
    assert f"set {secret} in .env" in result.stderr


def test_env_example_leaves_the_secrets_empty() -> None:
    values = env_example()
    assert all(values[secret] == "" for secret in SECRETS)


def test_env_example_documents_every_variable_the_compose_file_uses() -> None:
    documented = set(env_example())
    assert variables_used() <= documented
    assert documented - variables_used() <= COMPOSE_SETTINGS


def test_every_variable_in_env_example_has_a_comment() -> None:
    lines = ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith("#") and not lines[i - 1].startswith("#"):
            # A variable may follow another one of the same group (the ports).
            assert re.match(r"[A-Z_]+=", lines[i - 1]), f"no comment above {line!r}"


def test_every_mounted_file_and_build_context_exists(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        for source, target, _ in bind_mounts(service):
            assert Path(source).exists(), f"{name}: {source} (-> {target}) does not exist"
        build = service.get("build")
        if build:
            context = Path(build["context"])
            assert (context / build.get("dockerfile", "Dockerfile")).is_file(), name


def test_project_files_are_mounted_read_only(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        for source, target, read_only in bind_mounts(service):
            assert read_only, f"{name}: {source} -> {target} is writable"


def test_state_lives_in_named_volumes(config: dict[str, Any]) -> None:
    expected = {
        "prometheus": "prometheus-data:/prometheus",
        "alertmanager": "alertmanager-data:/alertmanager",
        "grafana": "grafana-data:/var/lib/grafana",
    }
    for name, volume in expected.items():
        assert any(v.startswith(volume) for v in services(config)[name]["volumes"]), name
        assert volume.split(":")[0] in config["volumes"]


def test_prometheus_keeps_data_for_a_bounded_time_and_size(config: dict[str, Any]) -> None:
    command = services(config)["prometheus"]["command"]
    assert "--storage.tsdb.retention.time=30d" in command
    assert "--storage.tsdb.retention.size=20GB" in command


def image_reference_is_pinned(image: str) -> bool:
    """name:tag with a tag that is not `latest`, or a digest."""
    if "@sha256:" in image:
        return True
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and bool(tag) and tag != "latest"


def test_every_image_is_pinned(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        assert "image" in service, f"{name} has no image name"
        assert image_reference_is_pinned(service["image"]), f"{name}: {service['image']}"


def test_every_base_image_is_pinned(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        build = service.get("build")
        if not build:
            continue
        image = dockerfile.parse(
            Path(build["context"]) / build["dockerfile"], build.get("args", {})
        )
        assert image_reference_is_pinned(image.base_image), f"{name}: FROM {image.base_image}"


def test_locally_built_images_carry_the_project_version(config: dict[str, Any]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for name, service in services(config).items():
        if "build" in service:
            tag = service["image"].rpartition(":")[2]
            assert tag.split("-")[0] == version, f"{name}: {service['image']}"


@pytest.mark.parametrize("name", GPU_SERVICES)
def test_gpu_services_reserve_nvidia_gpus(config: dict[str, Any], name: str) -> None:
    devices = services(config)[name]["deploy"]["resources"]["reservations"]["devices"]
    assert any(d["driver"] == "nvidia" and "gpu" in d["capabilities"] for d in devices)


@pytest.mark.parametrize("name", DEMO_SERVICES)
def test_demo_services_need_no_gpu(config: dict[str, Any], name: str) -> None:
    assert "deploy" not in services(config)[name]


def test_gpu_and_demo_services_are_in_their_own_profiles(config: dict[str, Any]) -> None:
    for name in GPU_SERVICES:
        assert services(config)[name]["profiles"] == ["gpu"]
    for name in DEMO_SERVICES:
        assert services(config)[name]["profiles"] == ["demo"]
    assert env_example()["COMPOSE_PROFILES"] == "gpu"


def test_doctor_runs_on_demand_in_the_trainer_image_with_its_gpus(config: dict[str, Any]) -> None:
    doctor, trainer = services(config)["doctor"], services(config)["trainer"]
    assert doctor["profiles"] == ["doctor"]  # `docker compose run --rm doctor` enables it
    assert (doctor["image"], doctor["build"]) == (trainer["image"], trainer["build"])
    assert doctor["deploy"] == trainer["deploy"]
    assert doctor["entrypoint"] == ["mirrorwatch-doctor"]


def test_no_container_is_privileged_or_shares_host_namespaces(config: dict[str, Any]) -> None:
    for name, service in services(config).items():
        assert not service.get("privileged"), name
        assert "cap_add" not in service, name
        assert service.get("network_mode") != "host", name
        assert service.get("pid") != "host", name
        assert "no-new-privileges:true" in service.get("security_opt", []), name


def test_every_port_is_published_on_loopback_only(config: dict[str, Any]) -> None:
    published = 0
    for name, service in services(config).items():
        for port in service.get("ports", []):
            published += 1
            assert port.startswith("127.0.0.1:"), f"{name}: {port}"
    assert published == 5  # exporter (gpu and demo), prometheus, alertmanager, grafana


def test_grafana_admin_password_comes_from_env_and_anonymous_viewing_is_off(
    config: dict[str, Any],
) -> None:
    environment = services(config)["grafana"]["environment"]
    assert environment["GF_SECURITY_ADMIN_PASSWORD"] == SECRETS["GF_ADMIN_PASSWORD"]
    assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert environment["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_exporter_and_trainer_share_the_ingest_token(config: dict[str, Any]) -> None:
    token = SECRETS["MIRRORWATCH_INGEST_TOKEN"]
    for name in (*GPU_SERVICES, *DEMO_SERVICES):
        assert services(config)[name]["environment"]["MIRRORWATCH_INGEST_TOKEN"] == token


def test_exporters_answer_as_exporter_on_the_stack_network(config: dict[str, Any]) -> None:
    for name in ("exporter", "exporter-demo"):
        assert "exporter" in services(config)[name]["networks"]["default"]["aliases"]
    for name in (*GPU_SERVICES, *DEMO_SERVICES):
        if name.startswith("trainer"):
            env = services(config)[name]["environment"]
            assert env["MIRRORWATCH_URL"] == "http://exporter:9848"


def test_exporter_healthcheck_asks_readyz(config: dict[str, Any]) -> None:
    for name in ("exporter", "exporter-demo"):
        test = " ".join(services(config)[name]["healthcheck"]["test"])
        assert "/readyz" in test


def test_trainers_take_model_steps_and_batch_from_env(tmp_path: Path) -> None:
    config = resolved_config(
        tmp_path, TRAIN_MODEL="cnn", TRAIN_STEPS="7", TRAIN_BATCH_SIZE="32", TRAIN_EPOCHS="2"
    )
    command = services(config)["trainer"]["command"]
    assert {"--model=cnn", "--steps=7", "--batch-size=32", "--epochs=2"} <= set(command)


def test_demo_trainer_mirrors_the_simulated_gpus(config: dict[str, Any]) -> None:
    trainer = services(config)["trainer-demo"]
    assert "--cpu-replicas=2" in trainer["command"]
    bus_ids = trainer["environment"]["MIRRORWATCH_REPLICA_PCI_BUS_IDS"].split(",")
    assert bus_ids == [pci_bus_id(0), pci_bus_id(1)]


def test_exporter_image_installs_no_tensorflow_and_runs_as_a_user() -> None:
    text = (REPO / "exporter" / "Dockerfile").read_text(encoding="utf-8")
    instructions = [line for line in text.splitlines() if not line.startswith("#")]
    assert not any("[trainer]" in line or "tensorflow" in line.lower() for line in instructions)
    assert re.search(r"^USER (?!root|0\b)\S+", text, re.MULTILINE)
    assert re.search(r"^HEALTHCHECK .*\n.*/readyz", text, re.MULTILINE)


def test_trainer_image_runs_as_a_user() -> None:
    # What it installs and runs is checked by running it: tests/stack/test_runtime.py.
    assert dockerfile.parse(REPO / "trainer" / "Dockerfile").user not in ("root", "0")


def test_docker_build_context_leaves_out_the_virtual_environment() -> None:
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    assert {".venv", ".git", ".env"} <= set(ignored)
