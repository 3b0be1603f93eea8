"""The NVML backend's daemon thread: calls ``poll()`` until stopped, surviving any one round."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

# The loop never sleeps longer than this between rounds. A schedule changed by a scrape (a
# driver that vanished) does not wait for it: ``wake()`` ends the sleep at once.
MAX_SLEEP_S = 5.0
# A failing poll is retried after this long rather than spinning.
ERROR_PAUSE_S = 1.0


class BackgroundLoop:
    """One daemon thread calling ``poll()`` until stopped; ``poll`` returns the next delay."""

    def __init__(self, poll: Callable[[], float], *, name: str) -> None:
        self._poll = poll
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def wake(self) -> None:
        """End the current sleep now: the next round is due (a no-op while a round runs)."""
        self._wake.set()

    def stop(self, timeout_s: float) -> bool:
        """Ask the thread to finish and wait for it; False when it did not finish in time."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = self._poll()
            except Exception:
                # The thread is the backend's only way back from a failure: it must survive
                # anything one round throws, and say so.
                log.exception("NVML background work failed; retrying")
                delay = ERROR_PAUSE_S
            if delay > 0:
                self._wake.wait(min(delay, MAX_SLEEP_S))
            self._wake.clear()
