"""The words every part of mirrorwatch shares: run ids, workers, PCI bus ids, durations, addresses.

Standard library only: the trainer, the demo (and the compose stack's alert-log service, which
runs on the exporter image's Python), the rule generator and the dashboards all import it. Each
fact here is written once; anything else that needs it imports it from here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# --- training runs ----------------------------------------------------------------------------

RUN_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# "." and ".." match the pattern but name a directory step in a URL path; never a run.
RESERVED_RUN_IDS = frozenset({".", ".."})
RUN_RULE = "1 to 64 characters of [A-Za-z0-9_.-], not . or .."
MAX_WORKER = 1023  # a worker is its TF_CONFIG task index, 0..MAX_WORKER
# Plain decimal digits, no sign, space, point or leading zero: one spelling per worker.
WORKER_PATTERN = re.compile(r"^(?:0|[1-9][0-9]{0,3})$")
WORKER_RULE = f"decimal digits 0..{MAX_WORKER}, no sign, space or leading zero"


def is_run_id(text: str) -> bool:
    # fullmatch: `$` alone would let a trailing newline through.
    return RUN_PATTERN.fullmatch(text) is not None and text not in RESERVED_RUN_IDS


def is_worker_index(text: str) -> bool:
    """Whether ``text`` spells a worker index the one accepted way: ``7``, not ``+7``, ``07``."""
    return WORKER_PATTERN.fullmatch(text) is not None and int(text) <= MAX_WORKER


# --- PCI bus ids --------------------------------------------------------------------------------

_BUS_ID = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def canonical_bus_id(value: str) -> str:
    """``dddd:bb:dd.f`` in lower case (``lspci -D``, sysfs and TensorFlow spell it so).

    NVML's ``00000000:1B:00.0`` and TensorFlow's ``0000:1b:00.0`` become the same string; a
    missing domain means domain 0. Raises ValueError for anything that is not a bus id.
    """
    match = _BUS_ID.match(value.strip())
    if match is None:
        raise ValueError(f"not a PCI bus id: {value!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


def nvml_bus_id(value: str) -> str:
    """The bus id as NVML spells it for ``nvmlDeviceGetHandleByPciBusId``: ``00000000:1B:00.0``."""
    domain, bus, slot = canonical_bus_id(value).split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{slot.upper()}"


# --- durations --------------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 7 * 86400.0,
    "y": 365 * 86400.0,
}
# Prometheus's own duration syntax (model.ParseDuration): whole numbers, units largest first.
_PROMETHEUS_DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")
DURATION_HINT = 'a number of seconds or a duration such as "90s", "5m", "1h30m" or "250ms"'


def parse_duration(value: object) -> float:
    """Seconds from a number of seconds, or a string: "90", "90s", "5m", "1h30m", "250ms"."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if math.isfinite(value) and value >= 0:
            return float(value)
    elif isinstance(value, str):
        text = value.strip().replace(" ", "")
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_PART.findall(text)
            if parts and "".join(n + u for n, u in parts) == text:
                return sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
        else:
            if math.isfinite(seconds) and seconds >= 0:
                return seconds
    raise ValueError(f"expected {DURATION_HINT}, got {value!r}")


def is_prometheus_duration(text: str) -> bool:
    """Whether Prometheus accepts ``text`` where its configs and rules take a duration."""
    return bool(text) and _PROMETHEUS_DURATION.match(text) is not None


def parse_prometheus_duration(text: str) -> float:
    """Seconds in a Prometheus duration (90s, 5m, 1h30m, 250ms, 0s); ValueError otherwise."""
    if not is_prometheus_duration(text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return parse_duration(text)


def format_duration(seconds: float) -> str:
    """A Prometheus duration for ``seconds``, in whole milliseconds below a second."""
    if seconds <= 0:
        return "0s"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{round(seconds * 1000)}ms"


# --- addresses --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Address:
    """A TCP address, HOST:PORT (an IPv6 host in brackets)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """ValueError, naming the expected form, for anything but HOST:PORT with port 1..65535."""
        host, sep, port = text.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"expected HOST:PORT such as 127.0.0.1:9090, got {text!r}")
        if not 0 < int(port) < 65536:
            raise ValueError(f"port {port} is out of range 1..65535 in {text!r}")
        return cls(host, int(port))

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self}"
