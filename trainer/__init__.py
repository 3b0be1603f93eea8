"""Training telemetry for mirrorwatch: the Keras callback and the instrumented training service.

``from mirrorwatch.trainer import MirrorwatchCallback``. The callback is imported on first use,
so the package's pure helpers (and ``mirrorwatch-train --help``) don't start TensorFlow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mirrorwatch.trainer.callback import MirrorwatchCallback

__all__ = ["MirrorwatchCallback"]


def __getattr__(name: str) -> Any:
    if name == "MirrorwatchCallback":
        from mirrorwatch.trainer.callback import MirrorwatchCallback

        return MirrorwatchCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
