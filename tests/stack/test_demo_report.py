"""The demo's run report: `make report` finds the running demo by itself, a failed restart
deletes nothing, and the report is written even when the demo's stdout has gone away."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from demo import report as demo_report
from demo.stack import REPO
from demo.state import STATE_FILE, DemoState, StateError, fresh_folder, running_demo
from demo.terminal import say
from mirrorwatch.report import cli as report_cli
from tests.e2e.drill import binary
from tests.hang import HANG_SECONDS
from tests.stack.test_demo import demo_command, free_addresses, refused

WAIT_SECONDS = 60


def _state(tmp_path: Path, *, pid: int, run: str | None) -> DemoState:
    return DemoState(
        pid=pid,
        scenario="imbalance",
        run=run,
        instance="127.0.0.1:19848",
        prometheus="http://127.0.0.1:19090",
        report_dir=str(tmp_path / "reports" / "demo-imbalance-1"),
        started_at=time.time() - 600,
    )


def _record_report_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The mirrorwatch-report command lines `make report` would run, instead of running them."""
    asked: list[list[str]] = []

    def record(argv: list[str]) -> int:
        asked.append(argv)
        return 0

    monkeypatch.setattr(report_cli, "main", record)
    return asked


def test_make_report_takes_run_prometheus_and_range_from_the_running_demo(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _state(tmp_path, pid=os.getpid(), run="demo-imbalance").write(tmp_path)
    asked = _record_report_calls(monkeypatch)
    assert demo_report.main([f"--workdir={tmp_path}"]) == 0
    argv = asked[0]
    assert argv[argv.index("--run") + 1] == "demo-imbalance"
    assert argv[argv.index("--prometheus") + 1] == "http://127.0.0.1:19090"
    out = Path(argv[argv.index("--out") + 1])
    assert out.parent == tmp_path / "reports"
    assert out.name.startswith("demo-imbalance-1-report-")
    since = argv[argv.index("--since") + 1]
    assert since.endswith("s")
    assert 600 <= int(since[:-1]) <= 700  # back to the demo's start


def test_two_make_report_calls_leave_two_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _state(tmp_path, pid=os.getpid(), run="demo-imbalance").write(tmp_path)
    asked = _record_report_calls(monkeypatch)
    # The run's own folder is the demo's Ctrl-C report: neither call may write there.
    (tmp_path / "reports" / "demo-imbalance-1").mkdir(parents=True)
    assert demo_report.main([f"--workdir={tmp_path}"]) == 0
    assert demo_report.main([f"--workdir={tmp_path}"]) == 0
    outs = [Path(argv[argv.index("--out") + 1]) for argv in asked]
    assert len(set(outs)) == 2
    assert all(out.is_dir() for out in outs)
    assert tmp_path / "reports" / "demo-imbalance-1" not in outs


def test_a_fresh_folder_is_never_one_that_exists(tmp_path: Path) -> None:
    made = [fresh_folder(tmp_path / "reports" / "run") for _ in range(3)]
    assert [p.name for p in made] == ["run", "run-2", "run-3"]


def test_make_report_flags_replace_what_the_demo_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _state(tmp_path, pid=os.getpid(), run=None).write(tmp_path)
    asked = _record_report_calls(monkeypatch)
    assert demo_report.main([f"--workdir={tmp_path}"]) == 0
    assert asked[0][asked[0].index("--instance") + 1] == "127.0.0.1:19848"  # --no-train
    demo_report.main([f"--workdir={tmp_path}", "--run=other", "--since=5m", "--out=x"])
    assert asked[1][asked[1].index("--run") + 1] == "other"
    assert asked[1][asked[1].index("--since") + 1] == "5m"
    assert asked[1][asked[1].index("--out") + 1] == "x"


def test_make_report_without_a_running_demo_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo_report.main([f"--workdir={tmp_path}"]) == 2
    assert "no demo is running" in capsys.readouterr().err
    # A demo killed with SIGKILL leaves its file behind: stale, and said to be.
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    _state(tmp_path, pid=int(gone.stdout), run="demo-imbalance").write(tmp_path)
    with pytest.raises(StateError, match="no longer running"):
        running_demo(tmp_path)


def test_a_failed_restart_deletes_nothing(tmp_path: Path) -> None:
    report = tmp_path / "reports" / "demo-healthy-20260101-000000" / "report.html"
    log = tmp_path / "stack" / "exporter.log"
    for path in (report, log):
        path.parent.mkdir(parents=True)
        path.write_text("kept")
    result = refused(free_addresses(), tmp_path, "--scenario=nosuch")
    assert result.returncode == 2
    assert result.stderr.startswith("make demo: SCENARIO: unknown scenario 'nosuch'")
    assert len(result.stderr.splitlines()) == 1
    assert report.read_text() == "kept"
    assert log.read_text() == "kept"


def test_say_survives_a_reader_that_went_away(tmp_path: Path) -> None:
    # A child whose stdout pipe is closed before it writes: say() must not raise, and the
    # interpreter's flush at exit must not complain either.
    code = (
        "import time; time.sleep(0.5)\n"
        "from demo.terminal import say\n"
        "for _ in range(3): say('x' * 70000)\n"
        "open('done', 'w').close()\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    process.stdout.close()
    _, stderr = process.communicate(timeout=HANG_SECONDS)
    assert process.returncode == 0, stderr
    assert stderr == b""
    assert (tmp_path / "done").exists()
    say("a line to the test's own stdout works as print does")


def _samples(prometheus: str, instance: str) -> float:
    ups = f'mirrorwatch_up{{instance="{instance}"}}'
    query = urllib.parse.urlencode({"query": f"count_over_time({ups}[5m])"})
    with urllib.request.urlopen(f"{prometheus}/api/v1/query?{query}", timeout=5) as response:
        result = json.load(response)["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


def test_make_report_and_the_ctrl_c_report_of_a_piped_demo(tmp_path: Path) -> None:
    binary("prometheus")
    binary("prometheus-alertmanager", "alertmanager")
    addresses = free_addresses()
    workdir = tmp_path / "demo"
    log = tmp_path / "demo.log"
    # `make demo 2>&1 | tee demo.log` in a terminal of its own: Ctrl-C reaches the whole group.
    command = shlex.join(demo_command(addresses, workdir, "--no-train", "--scenario=imbalance"))
    shell = subprocess.Popen(
        ["sh", "-c", f"{command} 2>&1 | tee {shlex.quote(str(log))} >/dev/null"],
        cwd=REPO,
        start_new_session=True,
    )
    demo_pid = 0
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not (workdir / STATE_FILE).exists():
            assert shell.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the demo wrote no state file"
            time.sleep(0.2)
        state = running_demo(workdir)
        demo_pid = state.pid
        assert state.instance == str(addresses["exporter"])
        # Where the Ctrl-C report will be, said while the pipe still carries it.
        page = Path(state.report_dir) / "report.html"
        assert f"Ctrl-C writes the run report to {page} " in log.read_text()
        while _samples(state.prometheus, state.instance) < 3:
            assert time.monotonic() < deadline, "Prometheus scraped no exporter samples"
            time.sleep(1)
        made = subprocess.run(
            [sys.executable, "-m", "demo.report", f"--workdir={workdir}"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=HANG_SECONDS,
            check=False,
        )
        assert made.returncode == 0, made.stderr
        # Its own folder, printed first: the Ctrl-C report below gets another.
        made_page = Path(made.stdout.split()[0])
        assert made_page.exists()
        assert made_page.parent != Path(state.report_dir)
        assert not page.exists()
        # Ctrl-C: tee dies with it, so every later line of the demo hits EPIPE.
        os.killpg(shell.pid, signal.SIGINT)
        shell.wait(timeout=HANG_SECONDS)
        while not _gone(demo_pid):
            assert time.monotonic() < deadline + 120, "the demo did not stop"
            time.sleep(0.2)
    finally:
        if shell.poll() is None or (demo_pid and not _gone(demo_pid)):
            os.killpg(shell.pid, signal.SIGKILL)
            shell.wait()
    assert page.exists(), "the Ctrl-C report was not written"
    assert made_page.exists(), "the Ctrl-C report replaced make report's"
    assert not (workdir / STATE_FILE).exists()
    # The newest report, found again by `make last-report`.
    last = subprocess.run(
        [sys.executable, "-m", "demo.last_report", f"--workdir={workdir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
        check=True,
    )
    assert last.stdout.splitlines()[0] == str(page)
    assert last.stdout.splitlines()[1].startswith("top finding: ")
