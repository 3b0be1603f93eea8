"""A PyTorch loop that never closes its monitor, as scripts do that forget ``close()``.

    python -m tests.torch_monitor.unclosed_loop URL RUN raise|return

Trains STEPS steps with a MirrorwatchMonitor whose interval is far longer than the script (so
only the exit can send the final state), prints ``trained`` once the steps are done, then
raises (``raise``: the exception ends the process) or returns (``return``: a normal exit).
At exit, after the monitor's own exit handler (atexit runs the last registered first), it
prints ``exit handlers took S`` seconds since the steps were done.
"""

from __future__ import annotations

import atexit
import sys
import time

STEPS = 5
BATCH = 8


class DivergedError(RuntimeError):
    """What a training loop raises halfway (a NaN loss, a bad batch, a lost peer)."""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main(url: str, run: str, mode: str) -> None:
    import torch

    from mirrorwatch.torch import MirrorwatchMonitor

    trained: list[float] = []
    atexit.register(lambda: say(f"exit handlers took {time.monotonic() - trained[0]:.3f}"))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    monitor = MirrorwatchMonitor(url=url, run=run, interval=3600)
    monitor.attach(model)
    for _ in range(STEPS):
        x, y = torch.randn(BATCH, 4), torch.randn(BATCH, 1)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        monitor.step(BATCH, loss, epoch=0)
    trained.append(time.monotonic())
    say("trained")
    if mode == "raise":
        raise DivergedError(f"loss is nan after {STEPS} steps")


if __name__ == "__main__":
    main(*sys.argv[1:4])
