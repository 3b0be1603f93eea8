"""mirrorwatch-report against a real Prometheus scraping simulated hosts with training runs.

Four hosts, one per scenario, run at once under one Prometheus (1 s scrapes); each gets a run
pushed every second for RUN_SECONDS. Each report must name the scenario's fault first, every
figure must be what its own query gives, and the page must render in a real browser.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.report.stack import EFFICIENCY, SPEEDUP, Hosts, run_of, running_hosts

SCENARIOS = (
    "imbalance",
    "thermal-throttle",
    "pcie-degraded",
    "healthy",
    "cross-numa",
    "foreign-process",
)
# Balanced and cool, but the pair has no NVLink and sits on two CPU sockets.
CROSS_NUMA = """
description: Two busy, balanced GPUs without NVLink, one on each CPU socket.
seed: 5
expected_alerts: []
gpus: {count: 2, nvlinks: 0, topology: cross_numa}
workload:
  utilization: {constant: 0.95, noise: {stddev: 0.01}}
"""
# thermal-throttle passes its slowdown temperature ~23 s in, pcie-degraded drops to x8 at 10 s.
RUN_SECONDS = 40
REPORT = str(Path(sys.executable).with_name("mirrorwatch-report"))
CHARTS = (
    "utilization",
    "spread",
    "throttle",
    "temperature",
    "clocks",
    "pcie",
    "throughput",
    "step_time",
    "alerts",
)


@dataclass
class Report:
    out: Path
    data: dict[str, Any]

    @property
    def findings(self) -> list[dict[str, Any]]:
        findings: list[dict[str, Any]] = self.data["findings"]
        return findings

    @property
    def top(self) -> dict[str, Any]:
        return self.findings[0]


@dataclass
class Reports:
    hosts: Hosts
    by_scenario: dict[str, Report]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reports]:
    workdir = tmp_path_factory.mktemp("report")
    cross_numa = workdir / "cross-numa.yaml"
    cross_numa.write_text(CROSS_NUMA, encoding="utf-8")
    files = {"cross-numa": str(cross_numa)}
    with running_hosts({s: files.get(s, s) for s in SCENARIOS}, workdir, RUN_SECONDS) as hosts:
        outs = {s: workdir / "out" / s for s in SCENARIOS}
        running = {
            s: subprocess.Popen(
                [
                    REPORT,
                    "--prometheus",
                    hosts.prometheus,
                    "--run",
                    run_of(s),
                    "--since",
                    "10m",
                    "--out",
                    str(outs[s]),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for s in SCENARIOS
        }
        for scenario, process in running.items():
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, f"{scenario}: {err}"
            assert str(outs[scenario] / "report.html") in out
        yield Reports(
            hosts,
            {
                s: Report(outs[s], json.loads((outs[s] / "findings.json").read_text()))
                for s in SCENARIOS
            },
        )


def test_imbalance_names_the_lagging_gpu(reports: Reports) -> None:
    top = reports.by_scenario["imbalance"].top
    assert (top["kind"], top["gpu"]) == ("imbalance", "1")
    assert top["share"] > 0.8
    assert top["runbook"] == "docs/runbook.md#gpuutilizationimbalance"
    figures = {f["name"]: f["value"] for f in top["evidence"]["figures"]}
    assert figures["spread of the range means"] == pytest.approx(0.15, abs=0.02)


def test_thermal_throttle_names_gpu_1_for_the_time_it_throttled(reports: Reports) -> None:
    report = reports.by_scenario["thermal-throttle"]
    top = report.top
    assert (top["kind"], top["gpu"]) == ("thermal_throttling", "1")
    # Independently: the share of GPU 1's raw samples over the range with a thermal reason on.
    headline = report.data["headline"]
    instance = headline["instances"][0]
    raw = reports.hosts.query(
        f'max_over_time(mirrorwatch_gpu_clocks_event_active{{instance="{instance}", gpu="1", '
        f'reason="sw_thermal_slowdown"}}[1s])[{headline["duration_seconds"]}s:1s]',
        headline["end"],
    )
    values = [float(v) for _, v in raw[0]["values"]]
    assert 0.2 < top["share"] < 0.9
    assert top["share"] == pytest.approx(sum(values) / len(values), abs=0.1)
    assert not any(f["kind"] == "thermal_throttling" and f["gpu"] == "0" for f in report.findings)


def test_pcie_degraded_names_the_link_below_its_maximum(reports: Reports) -> None:
    top = reports.by_scenario["pcie-degraded"].top
    assert (top["kind"], top["gpu"]) == ("pcie_degraded", "1")
    figures = {f["name"]: f["value"] for f in top["evidence"]["figures"]}
    assert (figures["narrowest link width"], figures["widest supported"]) == (8, 16)
    assert 0.6 < top["share"] <= 1


def test_a_pair_without_nvlink_across_sockets_is_the_interconnect(reports: Reports) -> None:
    findings = reports.by_scenario["cross-numa"].findings
    assert [f["kind"] for f in findings] == ["interconnect"]
    assert "across CPU sockets" in findings[0]["summary"]
    assert findings[0]["share"] > 0.9


def test_a_foreign_process_names_the_shared_gpu_and_how_long(reports: Reports) -> None:
    report = reports.by_scenario["foreign-process"]
    top = report.top
    assert (top["kind"], top["gpu"]) == ("foreign_process", "1")
    assert top["runbook"] == "docs/runbook.md#gpusharedwithforeignprocess"
    # The notebook arrives 10 s into the scenario and stays: most of the run's range.
    assert 0.5 < top["share"] <= 1
    figures = {f["name"]: f["value"] for f in top["evidence"]["figures"]}
    assert figures["most foreign processes at once"] == 1
    assert figures["most memory they held"] == 12 * 1024**3
    # GPU 0's probe came and went at 40 s, if the range reached it; GPU 1 is the one shared.
    assert next(f["gpu"] for f in report.findings if f["kind"] == "foreign_process") == "1"
    # Its chart is drawn under it; on hosts without such series it is left out (CHARTS).
    page = (report.out / "report.html").read_text(encoding="utf-8")
    chart = re.search(r'data-chart="foreign".*?</svg>', page, re.S)
    assert chart is not None
    assert "<polyline " in chart.group(0)


def test_a_healthy_run_has_nothing_wrong(reports: Reports) -> None:
    assert [f["kind"] for f in reports.by_scenario["healthy"].findings] == ["none"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_figure_is_what_its_query_gives(reports: Reports, scenario: str) -> None:
    for finding in reports.by_scenario[scenario].findings:
        evidence = finding["evidence"]
        for figure in evidence["figures"]:
            answer = reports.hosts.query(figure["query"], evidence["time"])
            matching = [
                float(series["value"][1])
                for series in answer
                if all(series["metric"].get(k) == v for k, v in figure["labels"].items())
            ]
            assert matching, f"{figure['name']}: no series {figure['labels']}"
            assert figure["value"] == pytest.approx(matching[0], rel=1e-9), figure["query"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_headline_figures_are_what_their_queries_give(reports: Reports, scenario: str) -> None:
    headline = reports.by_scenario[scenario].data["headline"]
    for name, query in headline["queries"].items():
        answer = reports.hosts.query(query, headline["end"])
        assert headline[name] == pytest.approx(float(answer[0]["value"][1]), rel=1e-9), name


def test_the_headline_weighs_the_speedup_against_ideal_and_the_target(reports: Reports) -> None:
    headline = reports.by_scenario["healthy"].data["headline"]
    assert headline["speedup"] == pytest.approx(SPEEDUP)
    assert headline["scaling_efficiency"] == pytest.approx(EFFICIENCY)
    assert (headline["ideal_speedup"], headline["efficiency_target"]) == (2, 0.9)
    assert headline["meets_target"] is False
    assert headline["steps"] > 0
    assert RUN_SECONDS - 10 <= headline["duration_seconds"] <= RUN_SECONDS + 5


# --- the page -------------------------------------------------------------------------------


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run `make tools` (Debian package chromium)")
    return path


def browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--disable-background-networking",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )


def test_every_chart_is_drawn_in_the_browser(reports: Reports) -> None:
    dom = browse(reports.by_scenario["thermal-throttle"].out / "report.html", "--dump-dom").stdout
    charts = re.findall(r'<svg class="chart" data-chart="(\w+)".*?</svg>', dom, re.S)
    assert sorted(charts) == sorted(CHARTS)
    for name in CHARTS:
        svg = re.search(rf'data-chart="{name}".*?</svg>', dom, re.S)
        assert svg is not None
        assert re.search(r"<(polyline|rect) ", svg.group(0)), f"{name}: nothing drawn"


def png_pixels(path: Path) -> tuple[int, int, set[bytes]]:
    """Width, height and the distinct RGB(A) pixels of an 8-bit PNG (filters undone)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        header = body if kind == b"IHDR" else header
        idat += body if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8
    assert colour in (2, 6)
    size = 3 if colour == 2 else 4
    raw, stride, previous = zlib.decompress(idat), width * size, bytearray(width * size)
    pixels: set[bytes] = set()
    for row in range(height):
        kind, line = (
            raw[row * (stride + 1)],
            bytearray(raw[row * (stride + 1) + 1 : (row + 1) * (stride + 1)]),
        )
        for i in range(stride):
            left = line[i - size] if i >= size else 0
            up, corner = previous[i], previous[i - size] if i >= size else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                guess = min(
                    (abs(p - left), 0, left), (abs(p - up), 1, up), (abs(p - corner), 2, corner)
                )
                line[i] = (line[i] + guess[2]) & 255
        pixels.update(bytes(line[i : i + size]) for i in range(0, stride, size * 7))
        previous = line
    return width, height, pixels


def test_the_page_screenshot_is_not_blank(reports: Reports, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    browse(
        reports.by_scenario["imbalance"].out / "report.html",
        "--window-size=900,1800",
        f"--screenshot={shot}",
    )
    width, height, pixels = png_pixels(shot)
    assert (width, height) == (900, 1800)
    assert len(pixels) > 50, "the screenshot is (nearly) one colour"


def test_the_page_needs_no_network(reports: Reports) -> None:
    html = (reports.by_scenario["pcie-degraded"].out / "report.html").read_text()
    assert not re.search(r"<script|<link|<img|src=|@import|url\(", html)


# --- bad input ------------------------------------------------------------------------------


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([REPORT, *args], capture_output=True, text=True, timeout=60)


def one_line_exit_2(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_unreachable_prometheus_is_one_line(tmp_path: Path) -> None:
    from demo.stack import free_port

    line = one_line_exit_2(
        report(
            "--prometheus", f"http://127.0.0.1:{free_port()}", "--run", "r", "--out", str(tmp_path)
        )
    )
    assert "cannot reach Prometheus" in line


def test_an_unknown_run_is_one_line(reports: Reports, tmp_path: Path) -> None:
    line = one_line_exit_2(
        report(
            "--prometheus", reports.hosts.prometheus, "--run", "no-such-run", "--out", str(tmp_path)
        )
    )
    assert "unknown run 'no-such-run'" in line


def test_an_empty_range_is_one_line(reports: Reports, tmp_path: Path) -> None:
    instance = reports.by_scenario["healthy"].data["headline"]["instances"][0]
    line = one_line_exit_2(
        report(
            "--prometheus", reports.hosts.prometheus, "--instance", instance,
            "--start", "2001-01-01T00:00:00Z", "--end", "2001-01-01T01:00:00Z",
            "--out", str(tmp_path),
        )
    )  # fmt: skip
    assert "empty range" in line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--run", "r", "--since", "soon"], "--since"),
        (["--run", "r b"], "--run"),
        (["--run", "r", "--instance", "h:1"], "--instance"),
        (["--run", "r", "--start", "yesterday", "--end", "1"], "--start"),
        (["--run", "r", "--start", "100"], "--end"),
        (["--instance", "nohost"], "--instance"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it(tmp_path: Path, args: list[str], flag: str) -> None:
    line = one_line_exit_2(
        report("--prometheus", "http://127.0.0.1:9", *args, "--out", str(tmp_path))
    )
    assert flag in line


def test_a_missing_flag_is_named(tmp_path: Path) -> None:
    line = one_line_exit_2(report("--run", "r", "--out", str(tmp_path)))
    assert "--prometheus" in line


# --- what the page shows, read from the browser's DOM ---------------------------------------


def chart_in_browser(report: Report, name: str) -> str:
    dom = browse(report.out / "report.html", "--dump-dom").stdout
    found = re.search(rf'<svg class="chart" data-chart="{name}".*?</svg>', dom, re.S)
    assert found is not None, name
    return found.group(0)


def y_ticks(svg: str) -> list[str]:
    """The y axis's labels, bottom first (line_chart writes them right-aligned at the left)."""
    from mirrorwatch.report.svg import LEFT

    at = f'<text x="{LEFT - 6}" y="([\\d.]+)" text-anchor="end">([^<]*)</text>'
    ticks = re.findall(at, svg)
    return [label for _, label in sorted(ticks, key=lambda tick: -float(tick[0]))]


def test_the_pcie_axis_reads_in_lane_widths(reports: Reports) -> None:
    ticks = y_ticks(chart_in_browser(reports.by_scenario["pcie-degraded"], "pcie"))
    assert {"x8", "x16"} <= set(ticks)
    assert set(ticks) <= {"x1", "x2", "x4", "x8", "x16", "x32"}


@pytest.mark.parametrize("name", ["utilization", "spread", "throughput", "temperature", "clocks"])
def test_value_axes_start_at_zero(reports: Reports, name: str) -> None:
    # A drop from 1,900 to 1,400 examples/s must read as a quarter off, not a collapse.
    ticks = y_ticks(chart_in_browser(reports.by_scenario["imbalance"], name))
    assert re.match(r"0([.,]0+)?\D", ticks[0] + " "), ticks


def test_alert_bars_are_coloured_by_severity(reports: Reports) -> None:
    from mirrorwatch.report.svg import SEVERITY_COLORS
    from tests.stack.test_notices import rule

    svg = chart_in_browser(reports.by_scenario["thermal-throttle"], "alerts")
    bars = re.findall(r'<rect [^>]*fill="(#\w+)" class="span"><title>([^:]+):', svg)
    assert "Watchdog" in {label for _, label in bars}
    for fill, label in bars:
        severity = rule(label.split(" (")[0])["labels"]["severity"]
        if label.startswith("Watchdog"):
            assert severity == "info"
        assert fill == SEVERITY_COLORS[severity], label


def test_one_spread_reads_the_same_in_the_summary_and_the_figures(reports: Reports) -> None:
    page = (reports.by_scenario["imbalance"].out / "report.html").read_text()
    figure = re.search(r"<td>spread of the range means</td><td class='num'>([^<]+)</td>", page)
    assert figure is not None
    assert figure.group(1).endswith(" pp")
    summary = next(f["summary"] for f in reports.by_scenario["imbalance"].findings)
    assert f"({figure.group(1)}, percentage points)" in summary


def test_the_runbook_link_says_where_it_goes_and_a_local_one_opens_offline(
    reports: Reports, tmp_path: Path
) -> None:
    published = (reports.by_scenario["imbalance"].out / "report.html").read_text()
    links = re.findall(r'<a href="([^"]+)">([^<]+)</a>', published)
    runbooks = [(href, text) for href, text in links if "runbook" in href]
    assert runbooks
    assert all(href == text for href, text in runbooks)  # no local-looking text on a web link
    runbook = Path(__file__).resolve().parents[2] / "docs" / "runbook.md"
    out = tmp_path / "with-local-runbook"
    result = report(
        "--prometheus", reports.hosts.prometheus, "--run", run_of("imbalance"),
        "--since", "10m", "--out", str(out), "--runbook", str(runbook),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    dom = browse(out / "report.html", "--dump-dom").stdout
    hrefs = [h for h in re.findall(r'<a href="([^"]+)">', dom) if "runbook" in h]
    assert hrefs
    for href in hrefs:
        assert "://" not in href
        assert (out / href.partition("#")[0]).resolve() == runbook
