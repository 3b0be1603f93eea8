"""Which Keras the trainer runs on: tf_keras under ``TF_USE_LEGACY_KERAS``, else Keras 3.

Chosen the way TensorFlow chooses what ``tf.keras`` is (``KerasLazyLoader._initialize`` in
tensorflow/python/util/lazy_loader.py): ``TF_USE_LEGACY_KERAS`` set to ``1``, ``true`` or
``True`` means tf_keras, anything else Keras 3. So the callback subclasses the same
``Callback`` as the user's ``tf.keras`` model calls, and a process that trains under
``MultiWorkerMirroredStrategy`` (which Keras 3 cannot fit under: keras-team/keras#20585,
tensorflow/tensorflow#72388) gets the tf_keras callback from the same import. The choice is made
once, on first use of ``keras_api.keras``, as TensorFlow makes it on first use of ``tf.keras``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import threading
from collections.abc import Mapping
from types import ModuleType
from typing import Any

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
# The values TensorFlow's lazy loader takes for "yes"; "yes", "on" or "TRUE" are not among them.
LEGACY_KERAS_VALUES = ("true", "True", "1")


def uses_tf_keras(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether TensorFlow's ``tf.keras`` is tf_keras in a process with this environment."""
    return environ.get(LEGACY_KERAS_ENV) in LEGACY_KERAS_VALUES


def tf_keras_installed() -> bool:
    """Whether tf_keras can be imported (without importing it, which starts TensorFlow)."""
    return importlib.util.find_spec("tf_keras") is not None


def _load() -> ModuleType:
    if not uses_tf_keras():
        return importlib.import_module("keras")
    try:
        return importlib.import_module("tf_keras")
    except ImportError as error:
        raise ImportError(
            f"{LEGACY_KERAS_ENV}={os.environ[LEGACY_KERAS_ENV]} asks for tf_keras, which is not "
            "installed: pip install 'mirrorwatch[trainer]' (or tf-keras of the same version as "
            "TensorFlow)"
        ) from error


_loaded: list[ModuleType] = []
_lock = threading.Lock()


def __getattr__(name: str) -> Any:
    # ``keras`` (Any to mypy, as both frameworks are: neither ships type information) is
    # imported on first use, so that a program can still set TF_USE_LEGACY_KERAS after
    # importing this module and before anything asks for Keras (mirrorwatch-train does).
    if name != "keras":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _lock:
        if not _loaded:
            _loaded.append(_load())
        return _loaded[0]
