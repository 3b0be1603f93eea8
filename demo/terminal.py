"""The demo's terminal output: a line that cannot fail, whatever happened to stdout.

`make demo | tee demo.log` and Ctrl-C stop `tee` as well, so the demo's next line hits a
broken pipe; a closed terminal gives EIO. Output is a courtesy, never a reason to skip the run
report or the cleanup: the first failed write silences stdout (pointed at /dev/null, so that
the interpreter's own flush at exit stays quiet too) and the demo carries on.
"""

from __future__ import annotations

import os
import sys
import threading

_lock = threading.Lock()  # the receiver prints from its own thread
_silenced = False


def say(text: str, *, error: bool = False) -> None:
    """Write one line to stdout (stderr with ``error``); a dead reader is not an error."""
    global _silenced
    stream = sys.stderr if error else sys.stdout
    with _lock:
        if _silenced and not error:
            return
        try:
            stream.write(text + "\n")
            stream.flush()
        except OSError:
            if not error:
                _silenced = True
                _point_at_devnull(stream)


def _point_at_devnull(stream: object) -> None:
    """Send the stream's file descriptor to /dev/null: nothing buffered may fail again."""
    fileno = getattr(stream, "fileno", None)
    if fileno is None:
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # a stream without a descriptor (a test's StringIO) has nothing to flush later
