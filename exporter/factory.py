"""Chooses the GPU backend the settings ask for: the simulator for --simulate, else NVML."""

from __future__ import annotations

from mirrorwatch.exporter.backend import GpuBackend
from mirrorwatch.exporter.nvml import NvmlBackend
from mirrorwatch.exporter.settings import Settings


def build_backend(settings: Settings) -> GpuBackend:
    """The backend for ``settings``; a bad scenario raises ScenarioError before anything runs."""
    if settings.simulate is not None:
        # Imported here: a GPU host never loads the simulator (~3 MiB of RSS).
        from mirrorwatch.exporter.simulate.backend import SimulatedBackend
        from mirrorwatch.exporter.simulate.scenario import load_scenario

        return SimulatedBackend(load_scenario(settings.simulate, gpus=settings.gpus))
    return NvmlBackend(retry_max_s=settings.nvml_retry_max_seconds)
