"""The mirrorwatch NVML exporter: per-GPU metrics for training hosts, and training telemetry."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("mirrorwatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
