"""Runs the real mirrorwatch-exporter as a process on a free loopback port, for live tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from tests.ports import free_port

EXPORTER = os.path.join(os.path.dirname(sys.executable), "mirrorwatch-exporter")


@dataclass
class RunningExporter:
    url: str
    process: subprocess.Popen[str]

    def stop(self) -> tuple[int, str]:
        """SIGTERM, as Docker and systemd stop it; the exit code and everything it logged."""
        self.process.send_signal(signal.SIGTERM)
        try:
            _, err = self.process.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return self.process.returncode, err


@contextmanager
def _sigint_as_in_a_terminal() -> Iterator[None]:
    """SIGINT at its default in the child, as a shell's foreground command has it.

    A shell without job control starts background commands with SIGINT ignored (POSIX), and a
    child inherits that; Python then keeps ignoring it, so a Ctrl-C test would see the
    exporter shrug off SIGINT. A handler set here is reset to the default across exec.
    """
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def running_exporter(
    args: Sequence[str],
    env: dict[str, str] | None = None,
    wait_for: str = "/healthz",
    scheme: str = "http",
    client: httpx.Client | None = None,
) -> Iterator[RunningExporter]:
    """Start the exporter, wait until ``wait_for`` answers, stop it (always) afterwards.

    ``client`` asks (an https one with the test CA and credentials, for a web config).
    """
    ask = client.get if client is not None else httpx.get
    port = free_port()
    with _sigint_as_in_a_terminal():
        process = subprocess.Popen(
            [EXPORTER, "--listen", f"127.0.0.1:{port}", *args],
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    exporter = RunningExporter(f"{scheme}://127.0.0.1:{port}", process)
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"exporter exited early: {process.communicate()[1]}")
            try:
                if ask(exporter.url + wait_for, timeout=2).status_code < 600:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)
        yield exporter
    finally:
        if process.poll() is None:
            exporter.stop()
