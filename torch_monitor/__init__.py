"""mirrorwatch for PyTorch: ``from mirrorwatch.torch import MirrorwatchMonitor``.

The monitor is imported on first use, so this package's name can be imported without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirrorwatch.torch.monitor import MirrorwatchMonitor

__all__ = ["MirrorwatchMonitor"]


def __getattr__(name: str) -> Any:
    if name == "MirrorwatchMonitor":
        from mirrorwatch.torch.monitor import MirrorwatchMonitor

        return MirrorwatchMonitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
