"""A cache whose key loses a part: what a broken cache key looks like, for the oracle tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Key = tuple[Any, ...]


class KeyChanging(dict[Key, Any]):
    """A dict that stores and finds each entry under ``key(the key given)``."""

    def __init__(self, key: Callable[[Key], Key], entries: dict[Key, Any] | None = None) -> None:
        super().__init__()
        self._key = key
        for found, value in (entries or {}).items():
            self[found] = value

    def get(self, key: Key, default: Any = None) -> Any:
        return super().get(self._key(key), default)

    def __setitem__(self, key: Key, value: Any) -> None:
        super().__setitem__(self._key(key), value)
