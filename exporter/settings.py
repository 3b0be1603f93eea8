"""Exporter settings: one pydantic-settings class; each field is also a MIRRORWATCH_* variable."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mirrorwatch.exporter.collectors.registry import COLLECTOR_NAMES
from mirrorwatch.exporter.ingest.auth import read_token_file

DEFAULT_PORT = 9848


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` for IPv6) and check the port; raises ValueError."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"port must be a number from 1 to 65535, got {port_text!r}")
    return host, int(port_text)


class Settings(BaseSettings):
    """Everything the exporter can be told, by flag or by ``MIRRORWATCH_*`` variable."""

    model_config = SettingsConfigDict(env_prefix="MIRRORWATCH_", extra="ignore")

    listen: str = Field(
        default=f"0.0.0.0:{DEFAULT_PORT}", description="address to serve HTTP on, HOST:PORT"
    )
    simulate: str | None = Field(
        default=None, description="built-in scenario name or scenario file; unset = real NVML"
    )
    gpus: int | None = Field(
        default=None, ge=1, le=64, description="simulated GPU count (default: the scenario's)"
    )
    expected_gpus: int = Field(
        default=0, ge=0, le=64, description="GPUs this host should have; 0 = not configured"
    )
    collectors: str = Field(
        default="all", description="comma-separated collectors to run, or 'all'"
    )
    nvml_retry_max_seconds: float = Field(
        default=60.0, gt=0, description="longest wait between NVML start attempts"
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    # Only a variable, never a flag: a token on the command line shows in `ps`.
    ingest_token: SecretStr | None = Field(
        default=None, description="bearer token the ingest API requires; unset = loopback only"
    )
    ingest_token_file: Path | None = Field(
        default=None, description="file holding the ingest bearer token"
    )
    run_ttl: float = Field(
        default=300.0,
        gt=0,
        le=7 * 24 * 3600,
        description="seconds without a push until a worker reads inactive; gone after twice that",
    )
    max_runs: int = Field(default=64, ge=1, le=100_000, description="training runs tracked at most")
    max_workers: int = Field(
        default=1024, ge=1, le=100_000, description="workers tracked at most, over all runs"
    )
    max_replicas: int = Field(
        default=64, ge=1, le=4096, description="replicas one worker may report at most"
    )

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("ingest_token_file", mode="before")
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

    @field_validator("collectors")
    @classmethod
    def _check_collectors(cls, value: str) -> str:
        unknown = [name for name in collector_list(value) if name not in COLLECTOR_NAMES]
        if unknown:
            known = ", ".join(COLLECTOR_NAMES)
            raise ValueError(f"unknown collector {unknown[0]!r}; known: all, {known}")
        return value

    @property
    def enabled_collectors(self) -> list[str]:
        return collector_list(self.collectors)

    def ingest_token_value(self) -> str | None:
        """The configured ingest token, from the variable or the file; None when neither."""
        if self.ingest_token is not None and self.ingest_token.get_secret_value():
            return self.ingest_token.get_secret_value()
        if self.ingest_token_file is not None:
            return read_token_file(self.ingest_token_file)
        return None


def collector_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    return list(COLLECTOR_NAMES) if names in ([], ["all"]) else names


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once; tests override it as a FastAPI dependency."""
    return Settings()
