"""A free loopback port for a live server a test or bench starts.

Not the OS's pick (bind to port 0): that comes from the kernel's ephemeral range
(net.ipv4.ip_local_port_range, 32768-60999 by default), the same range every outgoing
connection takes its source port from. Between picking a port and the server binding it
(seconds, for a Prometheus started after ten exporters) any connection on the machine could
take it: "bind: address already in use" (82 errors in one CI run). So the ports come from
below that range, which only explicit binds use, a block per pytest-xdist worker so that two
workers never hand out the same one, each checked free before it is handed out.
"""

from __future__ import annotations

import itertools
import os
import socket
from collections.abc import Iterator

# Below the kernel's default ephemeral range, above the well-known and registered services
# most hosts run.
FIRST_PORT = 20000
LAST_PORT = 32767
BLOCK = 1000
BLOCKS = (LAST_PORT + 1 - FIRST_PORT) // BLOCK


def _block() -> int:
    """This process's block: its xdist worker's number (gw3: 3), else one by its pid."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    number = worker.removeprefix("gw")
    return (int(number) if number.isdigit() else os.getpid()) % BLOCKS


def _candidates() -> Iterator[int]:
    first = FIRST_PORT + _block() * BLOCK
    return itertools.cycle(range(first, first + BLOCK))


_CANDIDATES = _candidates()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now and that this process has not
    handed out lately (the next of its block that binds)."""
    for port in itertools.islice(_CANDIDATES, BLOCK):
        if _free(port):
            return port
    raise OSError(f"no free port in {FIRST_PORT}-{LAST_PORT} block {_block()}")
