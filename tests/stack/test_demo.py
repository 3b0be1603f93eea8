"""`make demo` (python -m demo): it starts the pipeline, prints notifications, and Ctrl-C
leaves no process and no port behind."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from demo.processes import http_get
from demo.stack import REPO, port_is_free
from mirrorwatch.contract.vocabulary import Address
from tests.e2e.drill import binary
from tests.hang import HANG_SECONDS
from tests.ports import free_port

DEADLINE_SECONDS = 90


def children_of(pid: int) -> set[int]:
    """Every live descendant of ``pid``, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def demo_command(addresses: Mapping[str, Address | str], workdir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "demo",
        *(f"--{name}={address}" for name, address in addresses.items()),
        f"--workdir={workdir}",
        *extra,
    ]


def refused(
    addresses: Mapping[str, Address | str], workdir: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """A demo expected to refuse to start: its exit code and what it said."""
    return subprocess.run(
        demo_command(addresses, workdir, *extra),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=False,
    )


def free_addresses() -> dict[str, Address]:
    return {
        name: Address("127.0.0.1", free_port())
        for name in ("exporter", "prometheus", "alertmanager", "receiver")
    }


def test_demo_prints_notifications_and_ctrl_c_leaves_nothing_running(tmp_path: Path) -> None:
    binary("prometheus")
    binary("prometheus-alertmanager", "alertmanager")
    addresses = free_addresses()
    process = subprocess.Popen(
        demo_command(addresses, tmp_path / "demo", "--scenario=imbalance"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    stdout = process.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
    reader.start()
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not any("FIRING" in line and "Watchdog" in line for line in lines):
            assert process.poll() is None, "".join(lines)
            assert time.monotonic() < deadline, "no Watchdog printed:\n" + "".join(lines)
            time.sleep(0.2)
        started = children_of(process.pid)
        names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in started if alive(pid)}
        # The exporter, the trainer (Python), Prometheus and Alertmanager.
        assert len(started) >= 4, names
        # Every page the banner links answers, on the Prometheus this machine runs.
        links = set(re.findall(r"http://127\.0\.0\.1:\d+/[\w/.-]*", "".join(lines)))
        assert {f"{addresses['prometheus'].url}/", f"{addresses['alertmanager'].url}/"} & links
        assert [link for link in sorted(links) if http_get(link)[0] != 200] == []
        # A second demo from the same folder, on the same ports, is told what holds them.
        second = refused(addresses, tmp_path / "demo")
        assert second.returncode == 2
        assert second.stderr.startswith(
            f"make demo: a demo is already running (pid {process.pid})"
        ), second.stderr
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=HANG_SECONDS)
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(timeout=10)

    output = "".join(lines)
    assert process.returncode == 0, output
    assert "GpuUtilizationImbalance after" in output  # says what to expect, and when
    # The pre-flight before training, on the same simulated host, folded to what did not pass.
    assert "pre-flight: mirrorwatch-doctor --simulate imbalance (exit 0; every check: " in output
    assert re.search(r"\n\d+ passed, 0 warned, 0 failed, \d+ skipped\n", output), output
    assert "ok   pcie_degraded.width" not in output
    assert "stopped everything it started" in output
    # The run report of what it ran, with its top finding and what it cost (or why none).
    if "demo: run report: " in output:
        assert re.search(r"demo: top finding: \w+: .+", output), output
    assert [pid for pid in started if alive(pid)] == []
    assert all(port_is_free(address) for address in addresses.values())


def test_demo_refuses_a_busy_port(tmp_path: Path) -> None:
    binary("prometheus")
    addresses = free_addresses()
    with socket.socket() as holder:
        holder.bind((addresses["prometheus"].host, addresses["prometheus"].port))
        holder.listen()
        result = refused(addresses, tmp_path / "demo", "--no-train")
    assert result.returncode == 2
    # Named by the variable that moves it, with an example of that variable.
    said = f"make demo: port in use: PROMETHEUS_LISTEN={addresses['prometheus']}; "
    assert result.stderr.startswith(said), result.stderr
    assert "e.g. make demo PROMETHEUS_LISTEN=127.0.0.1:" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_bad_address_is_named_as_the_make_variable(tmp_path: Path) -> None:
    addresses: dict[str, Address | str] = {**free_addresses(), "exporter": "127.0.0.1:99999"}
    result = refused(addresses, tmp_path / "demo", "--check")
    assert result.returncode == 2
    assert result.stderr == (
        "make demo: EXPORTER_LISTEN: port 99999 is out of range 1..65535 in '127.0.0.1:99999'\n"
    )
