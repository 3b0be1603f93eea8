"""Child processes for the demo and the drills: started in their own session, stopped for sure.

A Process logs to a file and is stopped with its children (SIGTERM, then SIGKILL); Processes
stops every process it started, in reverse order, also on an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any


class StackError(RuntimeError):
    """A part of the stack could not start; the message names it and why."""


def http_get(url: str, timeout: float = 5) -> tuple[int, bytes]:
    """Status and body of a GET; an HTTP error status is an answer, not an exception."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def get_json(url: str, timeout: float = 5) -> Any:
    status, body = http_get(url, timeout)
    if status != 200:
        raise StackError(f"GET {url}: HTTP {status}: {body[:200]!r}")
    return json.loads(body)


class Process:
    """A child process in its own session, logging to a file; stop() ends it and its children.

    Its own session keeps a terminal's Ctrl-C away from it: the demo stops its children itself,
    in order, and waits for each.
    """

    def __init__(
        self,
        name: str,
        args: Sequence[str],
        log_path: Path,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.args = list(args)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self._popen: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        if self.alive():
            raise StackError(f"{self.name} is already running")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen is not None else None

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen is not None else None

    def _signal_group(self, signum: int) -> None:
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._popen.pid, signum)

    def kill(self) -> None:
        """SIGKILL at once, as a crash would end it."""
        if self._popen is None:
            return
        self._signal_group(signal.SIGKILL)
        self._popen.wait()

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds; reaps it either way."""
        if self._popen is None:
            return
        if self._popen.poll() is None:
            self._signal_group(signal.SIGTERM)
            try:
                self._popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self._signal_group(signal.SIGKILL)
                self._popen.wait()
        # Anything it left in its session (there should be nothing) goes too.
        self._signal_group(signal.SIGKILL)

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, url: str, timeout: float = 60) -> None:
        """Wait until ``url`` answers 200; StackError (with the log's end) if the process
        exits first or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        last = "no answer"
        while True:
            if not self.alive():
                raise StackError(
                    f"{self.name} exited with code {self.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            try:
                status, body = http_get(url, timeout=2)
                if status == 200:
                    return
                last = f"HTTP {status}: {body[:200]!r}"
            except (OSError, urllib.error.URLError) as error:
                last = str(error)
            if time.monotonic() > deadline:
                raise StackError(
                    f"{self.name} not ready at {url} after {timeout:.0f} s ({last}):\n"
                    + self.log_tail()
                )
            time.sleep(0.1)


class Processes:
    """Started processes, stopped in reverse order on close (also on an exception)."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self.started: list[Process] = []

    def start(self, process: Process, ready_url: str | None = None, timeout: float = 60) -> Process:
        # Registered first: an interrupt between the two must still stop the process.
        self._stack.callback(process.stop)
        self.started.append(process)
        process.start()
        if ready_url is not None:
            process.wait_ready(ready_url, timeout)
        return process

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Processes:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
