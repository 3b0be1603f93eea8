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
from pathlib import Path

from demo.cli import expectation, expected_alerts
from demo.stack import REPO, port_is_free
from mirrorwatch.contract.vocabulary import Address
from mirrorwatch.exporter.simulate.scenario import builtin_scenarios, load_scenario
from tests.e2e.drill import binary
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


def demo_command(addresses: dict[str, Address], workdir: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "demo",
        *(f"--{name}={address}" for name, address in addresses.items()),
        f"--workdir={workdir}",
        *extra,
    ]


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
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
            reader.join(timeout=10)

    output = "".join(lines)
    assert process.returncode == 0, output
    assert "GpuUtilizationImbalance after" in output  # says what to expect, and when
    # The pre-flight before training, on the same simulated host.
    assert "pre-flight: mirrorwatch-doctor --simulate imbalance (exit 0)" in output
    assert "ok   pcie_degraded.width [GPU 1]: x16 of x16" in output
    assert f"{addresses['prometheus'].url}/alerts" in output
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
        result = subprocess.run(
            demo_command(addresses, tmp_path / "demo", "--no-train"),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    assert f"port in use: prometheus {addresses['prometheus']}" in result.stderr


def test_the_expected_alerts_come_from_the_scenario_files() -> None:
    table = expected_alerts()
    assert set(table) == set(builtin_scenarios())
    assert table["thermal-throttle"] == tuple(
        alert.alert for alert in load_scenario("thermal-throttle").expected_alerts or ()
    )
    assert table["xid"] == ("GpuXidError", "GpuEccUncorrectable")  # two severities, one name
    assert table["healthy"] == ()


def test_the_demo_says_when_each_expected_alert_arrives() -> None:
    said = expectation("xid")
    assert re.search(r"GpuXidError after ~[0-9.]+ min \(warning; for: 0 s", said)
    assert re.search(r"GpuXidError after ~[0-9.]+ min \(critical; for: 0 s", said)
    assert re.search(r"GpuEccUncorrectable after ~[0-9.]+ min \(critical;", said)
    assert expectation("healthy").startswith("nothing but Watchdog")


def test_a_custom_scenario_may_say_what_it_drills(tmp_path: Path) -> None:
    unsaid = tmp_path / "unsaid.yaml"
    unsaid.write_text("description: d\n")
    assert expectation(str(unsaid)).startswith("a custom scenario")
    said = tmp_path / "said.yaml"
    said.write_text("description: d\nexpected_alerts: [{alert: GpuLost, severity: critical}]\n")
    assert expectation(str(said)).startswith("GpuLost after ~")
