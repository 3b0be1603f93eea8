"""Exporter settings: one pydantic-settings class; each field is also a MIRRORWATCH_* variable."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mirrorwatch.exporter.collectors.registry import COLLECTOR_NAMES

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

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
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


def collector_list(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    return list(COLLECTOR_NAMES) if names in ([], ["all"]) else names


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read once; tests override it as a FastAPI dependency."""
    return Settings()
