"""Exporter settings: one pydantic-settings class; each field is also a MIRRORWATCH_* variable.

The command line is generated from these fields (cli.py): a field's name is its flag, its
description the flag's help, and ``json_schema_extra={"metavar": ...}`` the placeholder the
help shows. A secret field is a variable only. Collector names are checked where the collectors
are (collectors/registry.py), so this module needs neither the collectors nor the ingest API.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mirrorwatch.contract.vocabulary import Address

ENV_PREFIX = "MIRRORWATCH_"
DEFAULT_PORT = 9848


def flag(name: str) -> str:
    """The command-line flag of the setting ``name``: ``max_runs`` -> ``--max-runs``."""
    return "--" + name.replace("_", "-")


def read_token_file(path: Path) -> str:
    """The token in ``path``, surrounding whitespace removed; ValueError saying why not."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as error:
        raise ValueError(f"cannot read token file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"token file {path} is not UTF-8 text") from None
    if not token:
        raise ValueError(f"token file {path} is empty")
    return token


def proxy_networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Addresses and networks, comma-separated; ``*`` is refused (uvicorn would then believe the
    left-most, client-written X-Forwarded-For entry)."""
    networks = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item == "*":
            raise ValueError("'*' would believe any client's X-Forwarded-For; list the proxies")
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"{item!r} is not an IP address or network") from None
    return networks


def only_loopback(networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> bool:
    return all(network.is_loopback for network in networks)


class Settings(BaseSettings):
    """Everything the exporter can be told, by flag or by ``MIRRORWATCH_*`` variable."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    listen: str = Field(
        default=f"0.0.0.0:{DEFAULT_PORT}",
        description="address to serve HTTP on",
        json_schema_extra={"metavar": "HOST:PORT"},
    )
    simulate: str | None = Field(
        default=None,
        description="built-in scenario name or a scenario YAML file; unset: real NVML",
        json_schema_extra={"metavar": "SCENARIO"},
    )
    gpus: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="simulated GPU count, 1..64; unset: the scenario's",
        json_schema_extra={"metavar": "N"},
    )
    expected_gpus: int = Field(
        default=0,
        ge=0,
        le=64,
        description="GPUs this host should have (GpuMissing); 0: not configured",
        json_schema_extra={"metavar": "N"},
    )
    collectors: str = Field(
        default="all",
        description="comma-separated collectors to run, or all",
        json_schema_extra={"metavar": "LIST"},
    )
    top_processes: int = Field(
        default=5,
        ge=0,
        le=64,
        description="per-process series for this many processes per GPU, by memory",
        json_schema_extra={"metavar": "N"},
    )
    nvml_retry_max_seconds: float = Field(
        default=60.0,
        gt=0,
        description="longest wait between NVML start attempts, seconds",
        json_schema_extra={"metavar": "S"},
    )
    # A secret: only a variable, never a flag (a token on the command line shows in `ps`).
    ingest_token: SecretStr | None = Field(
        default=None, description="bearer token the ingest API requires; unset: loopback only"
    )
    ingest_token_file: Path | None = Field(
        default=None,
        description="file holding the ingest bearer token (or MIRRORWATCH_INGEST_TOKEN; "
        "without either, only loopback clients may push)",
        json_schema_extra={"metavar": "PATH"},
    )
    run_ttl: float = Field(
        default=300.0,
        gt=0,
        le=7 * 24 * 3600,
        description="seconds without a push until a worker reads inactive; gone after twice that",
        json_schema_extra={"metavar": "S"},
    )
    # Sized for one host (docs/api.md, "Limits"): an exporter serves the host it runs on, and
    # a host of 8 or 16 GPUs runs a few runs of at most one worker process per GPU. A cluster
    # pushing into one exporter raises them by flag, at the scrape cost docs/api.md measures.
    max_runs: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="training runs tracked at most",
        json_schema_extra={"metavar": "N"},
    )
    max_workers_per_run: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="workers one run may have tracked at most",
        json_schema_extra={"metavar": "N"},
    )
    max_workers: int = Field(
        default=64,
        ge=1,
        le=100_000,
        description="workers tracked at most, over all runs",
        json_schema_extra={"metavar": "N"},
    )
    max_replicas: int = Field(
        default=16,
        ge=1,
        le=4096,
        description="replicas one worker may report at most",
        json_schema_extra={"metavar": "N"},
    )
    trusted_proxies: str = Field(
        default="127.0.0.1,::1",
        description="comma-separated addresses or networks of reverse proxies whose "
        "X-Forwarded-For is believed (the right-most address not in this list is the client); "
        "empty: none",
        json_schema_extra={"metavar": "LIST"},
    )
    max_header_bytes: int = Field(
        default=8192,
        ge=1024,
        le=65536,
        description="bytes of request line and headers a request may have; more: 431",
        json_schema_extra={"metavar": "N"},
    )
    header_timeout: float = Field(
        default=5.0,
        gt=0,
        le=300,
        description="seconds a connection has to send a request's line and headers; then 408",
        json_schema_extra={"metavar": "S"},
    )
    body_timeout: float = Field(
        default=10.0,
        gt=0,
        le=300,
        description="seconds an authenticated push has to send its body; then 408",
        json_schema_extra={"metavar": "S"},
    )
    web_config_file: Path | None = Field(
        default=None,
        description="exporter-toolkit web config (TLS, basic_auth_users), as node_exporter "
        "reads it; unset: plain HTTP, no basic auth",
        json_schema_extra={"metavar": "PATH"},
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="least severe log records written"
    )
    log_format: Literal["json", "text"] = Field(
        default="json", description="json (one object a line) or text"
    )

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        Address.parse(value)
        return value

    @field_validator("ingest_token_file", "web_config_file", mode="before")
    @classmethod
    def _empty_path_is_unset(cls, value: object) -> object:
        # `MIRRORWATCH_INGEST_TOKEN_FILE=` (as compose writes `${VAR:-}`) means no file, not ".".
        return None if value == "" else value

    @field_validator("ingest_token_file")
    @classmethod
    def _check_token_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        if value is None:
            return None
        token = info.data.get("ingest_token")
        if token is not None and token.get_secret_value():
            raise ValueError("set MIRRORWATCH_INGEST_TOKEN or a token file, not both")
        read_token_file(value)  # unreadable or empty: a startup error, not a surprise later
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: str) -> str:
        proxy_networks(value)
        return value

    @property
    def listen_address(self) -> Address:
        return Address.parse(self.listen)

    @property
    def proxies(self) -> list[str]:
        """The trusted proxies as uvicorn's ``forwarded_allow_ips`` takes them."""
        return [str(network) for network in proxy_networks(self.trusted_proxies)]

    def ingest_token_value(self) -> str | None:
        """The configured ingest token, from the variable or the file; None when neither."""
        if self.ingest_token is not None and self.ingest_token.get_secret_value():
            return self.ingest_token.get_secret_value()
        if self.ingest_token_file is not None:
            return read_token_file(self.ingest_token_file)
        return None
