"""What each compose service runs, listens on and checks, as Docker would run it.

The rules applied, from the Compose specification (docs.docker.com/reference/compose-file/
services) and the Dockerfile reference:
- `entrypoint` in compose replaces the image's ENTRYPOINT and clears its CMD; `command`
  replaces the image's CMD;
- a service's `healthcheck` replaces the image's HEALTHCHECK; without one the image's applies
  (a service on a locally built image inherits that Dockerfile's HEALTHCHECK);
- a service reaches another by its service name or a network alias, on the port that service's
  process listens on inside its container (published ports do not matter there);
- a service runs only when it has no `profiles` or one of them is active.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.stack import dockerfile

PROFILES = ("gpu", "demo")
# Grafana's [server] http_port default (grafana conf/defaults.ini), overridden by
# GF_SERVER_HTTP_PORT.
GRAFANA_DEFAULT_PORT = 3000
_LISTEN_FLAGS = ("--listen", "--web.listen-address")
_URL = re.compile(r"https?://([^/:'\"\s]+):(\d+)")


def active(config: Mapping[str, Any], profile: str) -> dict[str, dict[str, Any]]:
    """The services `COMPOSE_PROFILES=profile docker compose up` starts."""
    return {
        name: service
        for name, service in config["services"].items()
        if not service.get("profiles") or profile in service["profiles"]
    }


def image_of(service: Mapping[str, Any]) -> dockerfile.Dockerfile | None:
    """The parsed Dockerfile of a locally built service; None for a pulled image."""
    build = service.get("build")
    if not build:
        return None
    path = Path(build["context"]) / build.get("dockerfile", "Dockerfile")
    return dockerfile.parse(path, build.get("args", {}))


def argv(service: Mapping[str, Any]) -> list[str]:
    """The process the container starts: entrypoint and command after compose's overrides."""
    image = image_of(service)
    entrypoint = image.entrypoint if image else []
    cmd = image.cmd if image else []
    if "entrypoint" in service:
        entrypoint, cmd = _words(service["entrypoint"]), []
    if "command" in service:
        cmd = _words(service["command"])
    return [*entrypoint, *cmd]


def _words(value: str | list[str]) -> list[str]:
    return value.split() if isinstance(value, str) else list(value)


def healthcheck(service: Mapping[str, Any]) -> list[str] | None:
    """The command Docker runs to check the service, wherever it was set; None: none runs."""
    own = service.get("healthcheck")
    if own is not None:
        if own.get("disable"):
            return None
        test = _words(own["test"])
        if test[0] == "NONE":
            return None
        return test[1:] if test[0] in ("CMD", "CMD-SHELL") else test
    image = image_of(service)
    return image.healthcheck if image else None


def listen_port(service: Mapping[str, Any]) -> int:
    """The TCP port the service's process listens on inside its container."""
    words = argv(service)
    for i, word in enumerate(words):
        for flag in _LISTEN_FLAGS:
            if word == flag and i + 1 < len(words):
                return _port(words[i + 1])
            if word.startswith(flag + "="):
                return _port(word.partition("=")[2])
    environment = service.get("environment") or {}
    if "MIRRORWATCH_LISTEN" in environment:  # the exporter's flag, from its environment
        return _port(environment["MIRRORWATCH_LISTEN"])
    if "grafana" in service.get("image", ""):
        return int(environment.get("GF_SERVER_HTTP_PORT", GRAFANA_DEFAULT_PORT))
    raise AssertionError(f"cannot tell what port {words} listens on")


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


def urls_in(words: list[str]) -> list[tuple[str, int]]:
    """(host, port) of each http URL written in a command line."""
    return [(host, int(port)) for host, port in _URL.findall(" ".join(words))]


def resolve(services: Mapping[str, Mapping[str, Any]], host: str) -> str:
    """The one service a host name reaches on the stack network; fails for none or several."""
    found = [
        name
        for name, service in services.items()
        if host == name
        or any(
            host in (network or {}).get("aliases", [])
            for network in (service.get("networks") or {}).values()
        )
    ]
    assert len(found) == 1, f"{host!r} names {found or 'no service'}"
    return found[0]
