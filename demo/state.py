"""What a running `make demo` is, written where `make report` finds it: build/demo/state.json.

The demo writes it once every part is up and removes it when it stops; `make report` (and a
second `make demo`) read it. A file whose demo process is gone (killed with SIGKILL) is stale
and said to be.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE = "state.json"


class StateError(RuntimeError):
    """No running demo here; the message says what to do."""


@dataclass(frozen=True)
class DemoState:
    pid: int
    scenario: str
    run: str | None  # None with --no-train: the report is then of the exporter's instance
    instance: str  # the exporter as Prometheus labels it, HOST:PORT
    prometheus: str  # its URL
    report_dir: str  # where this run's report is written
    started_at: float  # unix seconds

    def write(self, workdir: Path) -> Path:
        path = workdir / STATE_FILE
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        partial.replace(path)  # a reader never sees half a file
        return path


def fresh_folder(path: Path) -> Path:
    """``path``, or ``path``-2, -3, ...: the first that did not exist, made now, so no two
    reports (two `make report` calls in one second, Ctrl-C after one) share a folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        candidate = path if n == 1 else path.with_name(f"{path.name}-{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise FileExistsError(f"{path}: a thousand reports of this name already")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: it exists
    return True


def running_demo(workdir: Path) -> DemoState:
    """The demo running from ``workdir``; StateError when none is."""
    path = workdir / STATE_FILE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        state = DemoState(**raw)
    except FileNotFoundError:
        raise StateError(
            f"no demo is running ({path} is absent): start one with `make demo`"
        ) from None
    except (OSError, ValueError, TypeError) as error:
        raise StateError(f"{path} is unreadable ({error}): restart `make demo`") from None
    if not _alive(state.pid):
        raise StateError(
            f"the demo that wrote {path} (pid {state.pid}) is no longer running: "
            "start one with `make demo`"
        )
    return state


def forget(workdir: Path) -> None:
    """Remove the state file (the demo has stopped)."""
    (workdir / STATE_FILE).unlink(missing_ok=True)
