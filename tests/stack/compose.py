"""docker-compose.yml as docker-compose resolves it, and the files the stack mounts.

Debian's docker-compose (1.29, `make tools`) interpolates and validates the file without a
Docker engine; it reads only the env file it is given, never a developer's .env.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from demo.stack import REPO
from tests.hang import HANG_SECONDS

COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"
# The two secrets .env.example leaves empty, filled for the checks that need a valid file.
SECRETS = {"GF_ADMIN_PASSWORD": "test-password", "MIRRORWATCH_INGEST_TOKEN": "test-token"}
GPU_SERVICES = ("exporter", "trainer")
DEMO_SERVICES = ("exporter-demo", "trainer-demo")


def tool(name: str, hint: str) -> str:
    """A validator's path; a missing one fails the test (CI installs it)."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.fail(f"{name} is not installed: {hint}", pytrace=False)
    return path


def docker_compose() -> str:
    return tool("docker-compose", "run `make tools` (Debian package docker-compose)")


def env_example() -> dict[str, str]:
    """.env.example's variables and values."""
    values = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env.example: not KEY=VALUE: {line!r}"
            values[key.strip()] = value.strip()
    return values


def run_compose(env: Mapping[str, str], tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """docker-compose with ``env`` as its env file and nothing else from the environment."""
    env_file = tmp / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()), encoding="utf-8")
    return subprocess.run(
        [docker_compose(), "--env-file", str(env_file), "-f", str(COMPOSE_FILE), *args],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp)},
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )


def resolved_config(tmp: Path, **overrides: str) -> dict[str, Any]:
    """The compose file after interpolation with .env.example's values, the secrets filled."""
    result = run_compose({**env_example(), **SECRETS, **overrides}, tmp, "config")
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = yaml.safe_load(result.stdout)
    return config


def variables_used() -> set[str]:
    """Every ${VARIABLE} docker-compose.yml interpolates."""
    text = COMPOSE_FILE.read_text(encoding="utf-8")
    return set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", text))


def bind_mounts(service: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    """(host path, container path, read-only) of each bind mount in a resolved service."""
    mounts = []
    for volume in service.get("volumes", []):
        parts = volume.split(":") if isinstance(volume, str) else []
        if parts and parts[0].startswith("/"):
            mounts.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
    return mounts


def host_path(service: Mapping[str, Any], container_path: str) -> Path:
    """The host file a container path of a resolved service comes from, through its mounts."""
    for source, target, _ in bind_mounts(service):
        if container_path == target:
            return Path(source)
        if container_path.startswith(target.rstrip("/") + "/"):
            return Path(source) / container_path[len(target.rstrip("/")) + 1 :]
    raise AssertionError(f"{container_path} is not mounted into the service")
