"""mirrorwatch-exporter beside nvitop-exporter on one stand-in NVML, and under a real Prometheus.

    python bench/peers_bench.py --out bench/results/peers.json

Both exporters run in their real-NVML mode over the same stand-in libnvidia-ml
(bench/peers/fakenvml: it replaces ``pynvml.nvmlLib``, so each one's own pynvml runs unchanged
and both pay the same for each NVML call), at 2, 8 and 32 GPUs. For each header mode, plain
(``Accept: text/plain;version=0.0.4``, no gzip) and Prometheus's (2.55's Accept and gzip), the
scrapes alternate A, B, A, B over one keep-alive connection each, so machine noise hits both
alike, and each exporter's CPU clock (every thread, children included) is read just before and
after each scrape. The floor is prometheus_client rendering the same samples in this process
(the format asked, gzipped at the exporter's level when asked). Then both sit unscraped to
measure idle CPU, and RSS is read. Last, Debian's Prometheus scrapes both every second for a
minute and reports its own ``scrape_duration_seconds`` and ``scrape_samples_scraped``.

nvitop-exporter collects in a background loop (``--interval``, 1 s by default) and renders at
scrape time; mirrorwatch reads NVML inside the scrape, so its CPU per scrape includes its
collection. Targets are ratios within one run (this machine is shared): CPU per scrape with
Prometheus's headers <= 0.7x nvitop-exporter's and <= 2x the floor; idle <= 0.3 ms of CPU per
second; RSS <= 60 MiB at 32 GPUs. `make bench` installs nvitop-exporter into its own
environment (build/bench/nvitop-venv), never into .venv.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from mirrorwatch.exporter.routes.metrics import GZIP_LEVEL
from tests.ports import free_port

HERE = Path(__file__).resolve().parent
FAKE_NVML = HERE / "peers" / "fakenvml"
MIRRORWATCH = Path(sys.executable).parent / "mirrorwatch-exporter"
NVITOP = Path("build/bench/nvitop-venv/bin/nvitop-exporter")
NVITOP_VERSION = "1.7.2"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# What Prometheus 2.55 (the stack's prom/prometheus:v2.55.1) sends with its default
# scrape_protocols [OpenMetricsText1.0.0, OpenMetricsText0.0.1, PrometheusText0.0.4]:
# scrape/scrape.go acceptHeader() weighs them q=0.5, 0.4, 0.3 (len(ScrapeProtocolsHeaders) + 1
# = 5 down) and adds */*;q=0.2; acceptEncodingHeader() sends gzip (enable_compression: true).
PROMETHEUS_HEADERS = {
    "Accept": "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "Accept-Encoding": "gzip",
    "User-Agent": "Prometheus/2.55.1",
    "X-Prometheus-Scrape-Timeout-Seconds": "10",
}
PLAIN_HEADERS = {"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "identity"}
MODES = {"plain": PLAIN_HEADERS, "prometheus": PROMETHEUS_HEADERS}
TARGETS = {
    "cpu_ratio_to_nvitop": 0.7,  # with Prometheus's headers, at every GPU count
    "cpu_ratio_to_floor": 2.0,  # with Prometheus's headers, at every GPU count
    "idle_cpu_ms_per_s": 0.3,
    "rss_mib_at_32_gpus": 60.0,
}
READY = {
    "mirrorwatch": "mirrorwatch_gpu_utilization_ratio{",
    "nvitop": "gpu_utilization_Percentage{",
}


# Process measurements.


def _cpu_clock(pid: int) -> int:
    """Linux's clock id for a whole process's CPU time (MAKE_PROCESS_CPUCLOCK(pid, SCHED))."""
    return ((~pid) << 3) | 2


def cpu_seconds(pid: int) -> float:
    """CPU seconds of ``pid`` (every thread, ns resolution) and of its children."""
    total = time.clock_gettime_ns(_cpu_clock(pid)) / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    total += (int(fields[13]) + int(fields[14])) / CLOCK_TICKS  # reaped children
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            children = (task / "children").read_text().split()
        except OSError:  # a thread that ended meanwhile (nvitop serves each request in one)
            continue
        for child in children:
            with contextlib.suppress(OSError, ValueError):  # exited meanwhile
                total += cpu_seconds(int(child))
    return total


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/{pid}/status")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


# Exporters.


class Exporter:
    """One exporter process on loopback with a persistent HTTP connection to it."""

    def __init__(self, name: str, command: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.port = free_port()
        self.command = [part.replace("{port}", str(self.port)) for part in command]
        self.log = log
        log_file = log.open("wb")
        self.process = subprocess.Popen(
            self.command,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_file.close()
        self._connection: http.client.HTTPConnection | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def get(self, headers: Mapping[str, str]) -> tuple[int, bytes, dict[str, str]]:
        """One GET /metrics, on the kept connection (reopened when the server closed it)."""
        for attempt in (0, 1):
            if self._connection is None:
                self._connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                self._connection.request("GET", "/metrics", headers=dict(headers))
                response = self._connection.getresponse()
                body = response.read()
                found = {k.lower(): v for k, v in response.getheaders()}
                if response.will_close:
                    self.disconnect()
                return response.status, body, found
            except (http.client.HTTPException, OSError):
                self.disconnect()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def disconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def wait_ready(self, gpus: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"{self.name} exited ({self.process.returncode}); see {self.log}")
            try:
                status, body, _ = self.get(PLAIN_HEADERS)
                found = body.decode().count("\n" + READY[self.name])
                if status == 200 and found >= gpus:
                    return
                last = f"HTTP {status}, {found}/{gpus} GPUs"
            except (OSError, http.client.HTTPException) as error:
                last = repr(error)
            time.sleep(0.2)
        raise SystemExit(f"{self.name} not ready after {timeout_s:.0f} s ({last}); see {self.log}")

    def stop(self) -> None:
        self.disconnect()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def decode(body: bytes, headers: Mapping[str, str]) -> str:
    if headers.get("content-encoding", "").lower() == "gzip":
        body = gzip.decompress(body)
    return body.decode("utf-8")


def sample_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


# The floor: prometheus_client's own rendering of the same samples.


class _Prebuilt:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def floor_cpu_ms(text: str, mode: str, renders: int) -> float:
    """CPU per render of ``text``'s samples by prometheus_client, as ``mode`` asks for them."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Prebuilt(list(text_string_to_metric_families(text))))
    started = time.process_time()
    for _ in range(renders):
        if mode == "prometheus":
            body: bytes = openmetrics.generate_latest(registry)  # type: ignore[no-untyped-call]
            zlib.compress(body, GZIP_LEVEL, wbits=31)
        else:
            generate_latest(registry)
    return (time.process_time() - started) / renders * 1000


# Phases.


def alternate(
    exporters: list[Exporter], mode: str, scrapes: int, warmup: int, floor_renders: int
) -> dict[str, Any]:
    headers = MODES[mode]
    for exporter in exporters:
        for _ in range(warmup):
            status, _, _ = exporter.get(headers)
            if status != 200:
                raise SystemExit(f"{exporter.name}: HTTP {status} in warm-up")
    cpu_ms: dict[str, list[float]] = {e.name: [] for e in exporters}
    latency_ms: dict[str, list[float]] = {e.name: [] for e in exporters}
    last: dict[str, tuple[bytes, dict[str, str]]] = {}
    for _ in range(scrapes):
        for exporter in exporters:
            cpu_before = cpu_seconds(exporter.pid)
            started = time.perf_counter()
            status, body, found = exporter.get(headers)
            elapsed = time.perf_counter() - started
            cpu_ms[exporter.name].append((cpu_seconds(exporter.pid) - cpu_before) * 1000)
            latency_ms[exporter.name].append(elapsed * 1000)
            if status != 200:
                raise SystemExit(f"{exporter.name}: HTTP {status}")
            last[exporter.name] = (body, found)
    result: dict[str, Any] = {}
    for exporter in exporters:
        body, found = last[exporter.name]
        text = decode(body, found)
        result[exporter.name] = {
            "samples": len(sample_lines(text)),
            "wire_bytes": len(body),
            "body_bytes": len(text.encode()),
            "content_type": found.get("content-type", ""),
            "content_encoding": found.get("content-encoding", "identity"),
            "latency_ms_p50": round(percentile(latency_ms[exporter.name], 0.5), 3),
            "latency_ms_p99": round(percentile(latency_ms[exporter.name], 0.99), 3),
            "cpu_ms_per_scrape_p50": round(percentile(cpu_ms[exporter.name], 0.5), 3),
            "cpu_ms_per_scrape_mean": round(statistics.fmean(cpu_ms[exporter.name]), 3),
        }
    # The floor renders mirrorwatch's samples; the text parser reads them from a plain scrape.
    plain = next(e for e in exporters if e.name == "mirrorwatch").get(PLAIN_HEADERS)
    floor = floor_cpu_ms(decode(plain[1], plain[2]), mode, floor_renders)
    ours, theirs = result["mirrorwatch"], result["nvitop"]
    result["floor_cpu_ms_per_render"] = round(floor, 3)
    result["ratios"] = {
        "cpu_to_nvitop": round(ours["cpu_ms_per_scrape_p50"] / theirs["cpu_ms_per_scrape_p50"], 3),
        "cpu_to_floor": round(ours["cpu_ms_per_scrape_p50"] / floor, 3),
        "latency_to_nvitop": round(ours["latency_ms_p50"] / theirs["latency_ms_p50"], 3),
    }
    return result


def idle(exporters: list[Exporter], seconds: float) -> dict[str, Any]:
    for exporter in exporters:
        exporter.disconnect()  # nothing kept open while idle
    before = {e.name: cpu_seconds(e.pid) for e in exporters}
    started = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - started
    return {
        e.name: {
            "idle_cpu_ms_per_s": round((cpu_seconds(e.pid) - before[e.name]) * 1000 / elapsed, 4),
            "rss_mib": round(status_kib(e.pid, "VmRSS") / 1024, 1),
            "rss_peak_mib": round(status_kib(e.pid, "VmHWM") / 1024, 1),
            "threads": len(list(Path(f"/proc/{e.pid}/task").iterdir())),
        }
        for e in exporters
    }


def environment(gpus: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MIRRORWATCH_", "MW_FAKE_"))}
    env.update(PYTHONPATH=str(FAKE_NVML), MW_FAKE_GPUS=str(gpus), PYTHONDONTWRITEBYTECODE="1")
    return env


def start_both(gpus: int, logs: Path, nvitop: Path) -> list[Exporter]:
    env = environment(gpus)
    mirrorwatch = Exporter(
        "mirrorwatch",
        [str(MIRRORWATCH), "--listen", "127.0.0.1:{port}", "--log-format", "text"],
        env,
        logs / f"mirrorwatch-{gpus}.log",
    )
    nv = Exporter(
        "nvitop",
        [str(nvitop), "--bind-address", "127.0.0.1", "--port", "{port}", "--interval", "1"],
        env,
        logs / f"nvitop-{gpus}.log",
    )
    exporters = [mirrorwatch, nv]
    try:
        mirrorwatch.wait_ready(gpus, 60)
        nv.wait_ready(gpus, 60 + 2 * gpus)
    except BaseException:
        for exporter in exporters:
            exporter.stop()
        raise
    return exporters


def measure(gpus: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    exporters = start_both(gpus, logs, args.nvitop)
    try:
        modes = {
            mode: alternate(exporters, mode, args.scrapes, args.warmup, args.floor_renders)
            for mode in MODES
        }
        rest = idle(exporters, args.idle_seconds)
    finally:
        for exporter in exporters:
            exporter.stop()
    return {"gpus": gpus, "modes": modes, "idle": rest}


# A real Prometheus.


def _query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    return cast(list[dict[str, Any]], answer["data"]["result"])


def under_prometheus(gpus: int, seconds: float, logs: Path, nvitop: Path) -> dict[str, Any]:
    """Debian's Prometheus scrapes both exporters every second; what it reports of each."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is missing: `make tools` installs Debian's package")
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.split("\n", 1)[0]
    exporters = start_both(gpus, logs, nvitop)
    data = Path(tempfile.mkdtemp(prefix="peers-prometheus-", dir=logs))
    port = free_port()
    jobs = [
        f"  - job_name: {e.name}\n    static_configs: [{{targets: ['127.0.0.1:{e.port}']}}]\n"
        for e in exporters
    ]
    config = data / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s}\nscrape_configs:\n" + "".join(jobs)
    )
    log = (logs / f"prometheus-{gpus}.log").open("wb")
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    log.close()
    base = f"http://127.0.0.1:{port}"
    try:
        for exporter in exporters:
            exporter.disconnect()
        cpu_before = {e.name: cpu_seconds(e.pid) for e in exporters}
        started = time.monotonic()
        time.sleep(seconds)
        elapsed = time.monotonic() - started
        cpu = {e.name: cpu_seconds(e.pid) - cpu_before[e.name] for e in exporters}
        window = f"{int(seconds)}s"
        result: dict[str, Any] = {"prometheus": version, "seconds": round(elapsed, 1)}
        for exporter in exporters:
            job = f'{{job="{exporter.name}"}}'
            durations = [
                float(v[1])
                for r in _query(base, f"scrape_duration_seconds{job}[{window}]")
                for v in r["values"]
            ]
            samples = _query(base, f"scrape_samples_scraped{job}")
            up = _query(base, f"avg_over_time(up{job}[{window}])")
            scrapes = len(durations)
            result[exporter.name] = {
                "scrapes": scrapes,
                "up_ratio": float(up[0]["value"][1]) if up else 0.0,
                "scrape_samples_scraped": int(float(samples[0]["value"][1])) if samples else 0,
                "scrape_duration_ms_p50": round(percentile(durations, 0.5) * 1000, 3),
                "scrape_duration_ms_p99": round(percentile(durations, 0.99) * 1000, 3),
                "scrape_duration_ms_max": round(max(durations) * 1000, 3),
                "cpu_ms_per_s": round(cpu[exporter.name] * 1000 / elapsed, 3),
            }
        return result
    finally:
        prometheus.terminate()
        prometheus.wait(15)
        for exporter in exporters:
            exporter.stop()


# Report.


def verdict(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target, met or not, with the worst measured value against it."""
    prometheus = [row["modes"]["prometheus"] for row in rows]
    worst_nvitop = max(p["ratios"]["cpu_to_nvitop"] for p in prometheus)
    worst_floor = max(p["ratios"]["cpu_to_floor"] for p in prometheus)
    idle_worst = max(row["idle"]["mirrorwatch"]["idle_cpu_ms_per_s"] for row in rows)
    rss = [row["idle"]["mirrorwatch"]["rss_mib"] for row in rows if row["gpus"] == 32]
    measured = {
        "cpu_ratio_to_nvitop": worst_nvitop,
        "cpu_ratio_to_floor": worst_floor,
        "idle_cpu_ms_per_s": idle_worst,
        "rss_mib_at_32_gpus": rss[0] if rss else None,
    }
    return {
        name: {
            "target": TARGETS[name],
            "worst": value,
            "met": value is not None and value <= TARGETS[name],
        }
        for name, value in measured.items()
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| GPUs | headers | samples mw / nv | CPU ms/scrape mw / nv / floor | to nvitop | to floor "
        "| p50 ms mw / nv |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["results"]:
        for mode, r in row["modes"].items():
            mw, nv = r["mirrorwatch"], r["nvitop"]
            lines.append(
                f"| {row['gpus']} | {mode} | {mw['samples']} / {nv['samples']} | "
                f"{mw['cpu_ms_per_scrape_p50']:.2f} / {nv['cpu_ms_per_scrape_p50']:.2f} / "
                f"{r['floor_cpu_ms_per_render']:.2f} | {r['ratios']['cpu_to_nvitop']:.2f} | "
                f"{r['ratios']['cpu_to_floor']:.2f} | "
                f"{mw['latency_ms_p50']:.2f} / {nv['latency_ms_p50']:.2f} |"
            )
    lines += ["", "| GPUs | idle CPU ms/s mw / nv | RSS MiB mw / nv |", "|---|---|---|"]
    for row in result["results"]:
        mw, nv = row["idle"]["mirrorwatch"], row["idle"]["nvitop"]
        lines.append(
            f"| {row['gpus']} | {mw['idle_cpu_ms_per_s']:.3f} / {nv['idle_cpu_ms_per_s']:.3f} "
            f"| {mw['rss_mib']:.1f} / {nv['rss_mib']:.1f} |"
        )
    p = result.get("prometheus")
    if p:
        lines += [
            "",
            f"{p['prometheus']}, every 1 s for {p['seconds']} s at {p['gpus']} GPUs:",
            "",
            "| exporter | scrapes | up | samples scraped | scrape_duration p50 / p99 / max ms "
            "| CPU ms/s |",
            "|---|---|---|---|---|---|",
        ]
        for name in ("mirrorwatch", "nvitop"):
            r = p[name]
            lines.append(
                f"| {name} | {r['scrapes']} | {r['up_ratio']:.2f} | {r['scrape_samples_scraped']} "
                f"| {r['scrape_duration_ms_p50']:.1f} / {r['scrape_duration_ms_p99']:.1f} / "
                f"{r['scrape_duration_ms_max']:.1f} | {r['cpu_ms_per_s']:.2f} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/peers.json"))
    parser.add_argument("--gpus", default="2,8,32", help="comma-separated GPU counts")
    parser.add_argument("--scrapes", type=int, default=300, help="per exporter, mode and size")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--floor-renders", type=int, default=100)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--prometheus-gpus", type=int, default=32, help="0: skip that phase")
    parser.add_argument("--prometheus-seconds", type=float, default=60.0)
    parser.add_argument("--nvitop", type=Path, default=NVITOP)
    args = parser.parse_args()
    for path in (MIRRORWATCH, args.nvitop):
        if not path.exists():
            parser.error(f"{path} is missing (`make bench` installs nvitop-exporter there)")
    logs = Path(tempfile.mkdtemp(prefix="peers-bench-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows = [measure(int(g), args, logs) for g in args.gpus.split(",")]
    result: dict[str, Any] = {
        "benchmark": "mirrorwatch-exporter beside nvitop-exporter on the stand-in NVML",
        "date": started,
        "machine": {**machine(), "load_average_before": load_before},
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "config": {
            "scrapes": args.scrapes,
            "warmup": args.warmup,
            "idle_seconds": args.idle_seconds,
            "nvitop_exporter": NVITOP_VERSION,
            "nvitop_interval_s": 1,
            "fake_nvml": "bench/peers/fakenvml/sitecustomize.py (H100 PCIe-like, no NVLink)",
            "modes": MODES,
            "logs": str(logs),
        },
        "targets": TARGETS,
        "results": rows,
    }
    if args.prometheus_gpus:
        phase = under_prometheus(args.prometheus_gpus, args.prometheus_seconds, logs, args.nvitop)
        result["prometheus"] = {"gpus": args.prometheus_gpus, **phase}
    result["machine"]["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
    result["met"] = verdict(rows)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print()
    for name, v in result["met"].items():
        met = "met" if v["met"] else "MISSED"
        print(f"{name}: worst {v['worst']} (target <= {v['target']}): {met}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
