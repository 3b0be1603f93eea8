"""Scale benchmark: simulated GPU hosts (64 x 8 or 64 x 64 GPUs) into the central store.

What runs (all real binaries, Debian's): `--exporters` simulated exporters of `--gpus-per-host`
GPUs (8 by default), each scraped as hosts / exporters hosts (targets with their own `host`,
`instance` and the `cluster` label, as per-host agents would write them); one vmagent scraping
the targets
every 15 s (deploy/fleet/vmagent/scrape.yml's interval) and remote-writing to VictoriaMetrics
single-node and, unless --no-prometheus, to a Prometheus with the remote-write receiver;
vmalert evaluating the production rules (alerts/mirrorwatch.rules.yml, every 15 s) against
VictoriaMetrics, the Prometheus evaluating the same file (--rules: another rule file, e.g.
an older one to compare). Every host's GPUs train (bench/scale_training.py: runs of
--hosts-per-run hosts, every GPU a replica; --no-training: idle hosts). After --warmup seconds,
the steady window of --seconds is measured:

- active series at the store, per GPU and per host; samples/s ingested; bytes per sample;
- every rule group's evaluations, mean and max seconds, and missed iterations, on vmalert and
  on Prometheus (bench/scale_rules.py);
- the query time of every panel of the Fleet dashboard (all hosts) and of the Training balance
  and GPU host dashboards (one host, its run) as Grafana asks them (tables: instant queries;
  graphs: range queries over the run at a 15 s step), the heaviest named;
- RSS and CPU time of every process; the load average before and after the window.

    python bench/scale_bench.py --out bench/results/scale.json                      # 512 GPUs
    python bench/scale_bench.py --hosts 64 --exporters 64 --gpus-per-host 64 \
      --out bench/results/scale-4096.json                                           # 4,096 GPUs
    python bench/scale_bench.py --seconds 60 --warmup 60 --out /tmp/scale.json      # a trial

`--evaluator victoriametrics` runs the VictoriaMetrics stack alone (vmagent, VictoriaMetrics,
vmalert: no comparison Prometheus, as `--no-prometheus`), `--evaluator prometheus` a Prometheus
alone that scrapes the targets itself (the same targets and labels) and evaluates the rules, no
VictoriaMetrics, vmagent or vmalert: each store gets the cores it would have on a host of its
own. `--time-rules` also asks the store each rule's expression after the window (median of
QUERY_REPEATS instant queries), the query's own cost beside the evaluator's time for the rule.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from bench.scale_rules import GroupTimes
from bench.scale_training import TrainingLoad, workers
from demo.processes import Process, Processes
from demo.stack import REPO, write_yaml
from mirrorwatch.contract.vocabulary import Address
from tests.dashboards.queries import expand, load_dashboards, panels
from tests.fleet.fleet import (
    VMAGENT_CONFIG,
    binary,
    central_prometheus_process,
    loopback,
    start_simulated_exporter,
    victoria_metrics_process,
    vmalert_process,
)

HOSTS = 64
GPUS_PER_HOST = 8
CLUSTER = "bench"
SCRAPE_INTERVAL = "15s"
EVALUATION_INTERVAL = "15s"
RULES = REPO / "alerts" / "mirrorwatch.rules.yml"
QUERY_REPEATS = 3
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- processes ----------------------------------------------------------------------------------


def rss_bytes(pid: int) -> dict[str, int]:
    """Resident memory now and at its peak (VmRSS, VmHWM)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) * 1024
    return {"rss_bytes": fields["VmRSS"], "peak_rss_bytes": fields["VmHWM"]}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the process (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


EVALUATORS = ("both", "victoriametrics", "prometheus")


def targets(exporters: Sequence[Address], hosts: int) -> list[dict[str, Any]]:
    """``hosts`` targets over the exporters, each labelled as a host of its own."""
    return [
        {
            "targets": [str(exporters[i % len(exporters)])],
            "labels": {"host": f"host-{i:02d}", "instance": f"host-{i:02d}"},
        }
        for i in range(hosts)
    ]


def vmagent_config(exporters: Sequence[Address], hosts: int) -> dict[str, Any]:
    """64 targets over the exporters: each is a host of its own at the store."""
    shipped = yaml.safe_load(VMAGENT_CONFIG.read_text(encoding="utf-8"))
    (job,) = shipped["scrape_configs"]
    return {
        "global": {
            "scrape_interval": shipped["global"]["scrape_interval"],
            "scrape_timeout": shipped["global"]["scrape_timeout"],
            # One vmagent stands in for 64: `host` comes from each target instead.
            "external_labels": {"cluster": CLUSTER},
        },
        "scrape_configs": [
            {"job_name": job["job_name"], "static_configs": targets(exporters, hosts)}
        ],
    }


def prometheus_config(exporters: Sequence[Address], hosts: int, rules: Path) -> dict[str, Any]:
    """A Prometheus scraping the same targets as vmagent_config, with the same labels (its
    series carry `cluster` as a target label: external labels never reach its own storage),
    and evaluating ``rules``."""
    agent = vmagent_config(exporters, hosts)
    (job,) = agent["scrape_configs"]
    cluster = agent["global"]["external_labels"]
    return {
        "global": {
            "scrape_interval": agent["global"]["scrape_interval"],
            "scrape_timeout": agent["global"]["scrape_timeout"],
            "evaluation_interval": EVALUATION_INTERVAL,
        },
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": job["job_name"],
                "static_configs": [
                    {**group, "labels": {**group["labels"], **cluster}}
                    for group in job["static_configs"]
                ],
            }
        ],
    }


def prometheus_process(workdir: Path, config: Path, listen: Address) -> Process:
    """The Prometheus of `--evaluator prometheus`: scraping and evaluating on its own."""
    args = [
        binary("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address={listen}",
        "--log.level=warn",
    ]
    return Process("prometheus", args, workdir / "prometheus.log")


# --- asking ---------------------------------------------------------------------------------------


def scalar(url: str, expr: str) -> float:
    response = httpx.get(f"{url}/api/v1/query", params={"query": expr, "nocache": "1"}, timeout=60)
    result = response.json()["data"]["result"]
    return float(result[0]["value"][1]) if result else 0.0


def own_metrics(url: str) -> dict[str, float]:
    """A process's own /metrics, as name{labels} -> value."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            values[f"{sample.name}{{{labels}}}"] = sample.value
    return values


def total(metrics: Mapping[str, float], name: str, **labels: str) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        value
        for key, value in metrics.items()
        if key.startswith(name + "{") and all(w in key for w in wanted)
    )


class QueryFailedError(Exception):
    """The store refused a query (a limit it enforces, a timeout): what it said."""


def series_by_name(url: str) -> dict[str, int]:
    """Series per metric name in the store's index today (VictoriaMetrics' /api/v1/status/tsdb,
    which counts past -search.maxUniqueTimeseries, where a count() query over them fails)."""
    body = httpx.get(f"{url}/api/v1/status/tsdb", params={"topN": "100000"}, timeout=120).json()
    counts = {row["name"]: int(row["value"]) for row in body["data"]["seriesCountByMetricName"]}
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


# One keep-alive connection for the timed queries, as Grafana and vmalert keep theirs: not a
# new connection's setup in every timing.
QUERIES = httpx.Client(timeout=120)


def time_query(url: str, path: str, params: Mapping[str, str]) -> tuple[float, int]:
    """Median seconds of QUERY_REPEATS asks, and the series the answer holds."""
    times = []
    series = 0
    for _ in range(QUERY_REPEATS):
        started = time.perf_counter()
        try:
            response = QUERIES.get(f"{url}{path}", params={**params, "nocache": "1"})
        except httpx.HTTPError as error:
            raise QueryFailedError(f"{type(error).__name__}: {error}") from None
        times.append(time.perf_counter() - started)
        try:
            body = response.json()
        except ValueError:
            raise QueryFailedError(f"HTTP {response.status_code}: {response.text[:300]}") from None
        if body.get("status") != "success":
            raise QueryFailedError(str(body.get("error", body))[:300])
        series = len(body["data"]["result"])
    return statistics.median(times), series


def dashboard_panels(
    url: str, title: str, selected: Mapping[str, str], start: float, end: float
) -> list[dict[str, Any]]:
    """Every panel of the dashboard ``title`` timed with the variables ``selected`` (the rest
    at All), heaviest first."""
    (dashboard,) = (d for d in load_dashboards().values() if d["title"] == title)
    variables = {
        "job": ".+",
        "host": ".*",
        "instance": ".+",
        "gpu": ".+",
        "run": ".+",
        "datasource": "prometheus",
        # Grafana's $__rate_interval for a 15 s data source interval: 4 x 15 s.
        "__rate_interval": "1m",
        "__rate_interval_ms": "60000",
        **selected,
    }
    measured = []
    for panel in panels(dashboard):
        seconds = 0.0
        series = 0
        errors = []
        each: list[float] = []
        for target in panel.get("targets", []):
            expr = expand(target["expr"], variables)
            try:
                if target.get("instant"):
                    params = {"query": expr, "time": f"{end}"}
                    took, found = time_query(url, "/api/v1/query", params)
                else:
                    params = {"query": expr, "start": f"{start}", "end": f"{end}", "step": "15"}
                    took, found = time_query(url, "/api/v1/query_range", params)
            except QueryFailedError as error:
                errors.append(f"{target.get('refId')}: {error}")
                continue
            seconds += took
            series += found
            each.append(round(took, 4))
        if panel.get("targets"):
            row: dict[str, Any] = {
                "panel": panel["title"],
                "queries": len(panel["targets"]),
                "seconds_sum_of_medians": round(seconds, 4),
                "seconds_each": each,
                "series_returned": series,
            }
            if errors:
                row["errors"] = errors
            measured.append(row)
    return sorted(measured, key=lambda p: -float(p["seconds_sum_of_medians"]))


def query_step(vmalert_args: Sequence[str]) -> str:
    """The `step` vmalert sends with every query: -datasource.queryStep, 5m unless set (the
    default of vmalert 1.79.4 on)."""
    flags = dict(a.partition("=")[::2] for a in vmalert_args if a.startswith("-"))
    return flags.get("-datasource.queryStep", "5m")


def rule_query_times(
    url: str, rules: Path, step: str | None = None, other_steps: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """Each rule's expression asked of the store as an instant query (with vmalert's `step`
    where given): the median seconds of QUERY_REPEATS and the series it answers, the slowest
    first; with ``other_steps``, its seconds at each of those too, asked in turn with the first
    (the same samples, the same load)."""
    measured = []
    for group in yaml.safe_load(rules.read_text(encoding="utf-8"))["groups"]:
        for place, rule in enumerate(group["rules"]):
            row: dict[str, Any] = {
                "group": group["name"],
                "place": place,
                "rule": rule.get("record") or rule.get("alert"),
            }
            try:
                params = {"query": rule["expr"]} | ({"step": step} if step else {})
                took, found = time_query(url, "/api/v1/query", params)
                row |= {"seconds": round(took, 4), "series": found}
                for other in other_steps:
                    took, _ = time_query(url, "/api/v1/query", params | {"step": other})
                    row.setdefault("seconds_at_step", {})[other] = round(took, 4)
            except QueryFailedError as error:
                row["error"] = str(error)
            measured.append(row)
    return sorted(measured, key=lambda r: -float(r.get("seconds", 0.0)))


# --- the run ----------------------------------------------------------------------------------


def load_average() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"1m": round(one, 2), "5m": round(five, 2), "15m": round(fifteen, 2)}


def store_series(url: str, victoria_metrics: bool) -> dict[str, int]:
    """Series per metric name at the store: VictoriaMetrics' index, or Prometheus's head
    (its /api/v1/status/tsdb lists only the top 10 names in this version)."""
    if victoria_metrics:
        return series_by_name(url)
    response = httpx.get(
        f"{url}/api/v1/query",
        params={"query": 'count by (__name__) ({__name__=~".+"})'},
        timeout=300,
    )
    counts = {
        row["metric"]["__name__"]: int(float(row["value"][1]))
        for row in response.json()["data"]["result"]
    }
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


# VictoriaMetrics' own counters over the window, each saying why a query waited: searches past
# -search.maxConcurrentRequests, searches slowed while inserts were saturated, the tag-filter
# cache (reset whenever a new series is registered) and new series themselves.
VM_INTERNALS: tuple[tuple[str, dict[str, str]], ...] = (
    ("vm_concurrent_select_limit_reached_total", {}),
    ("vm_concurrent_select_limit_timeout_total", {}),
    ("vm_search_delays_total", {}),
    ("vm_concurrent_addrows_limit_reached_total", {}),
    ("vm_cache_requests_total", {"type": "indexdb/tagFilters"}),
    ("vm_cache_misses_total", {"type": "indexdb/tagFilters"}),
    ("vm_new_timeseries_created_total", {}),
    ("vm_slow_queries_total", {}),
    ("vm_http_requests_total", {"path": "/api/v1/query"}),
)


class StoreCounters:
    """The store's own counters at the window's start and end: samples added, active series,
    bytes on disk per sample (VictoriaMetrics' only)."""

    def __init__(self, url: str, victoria_metrics: bool) -> None:
        self.url = url
        self.victoria_metrics = victoria_metrics
        self._before = own_metrics(url)

    def figures(self, window: float) -> dict[str, Any]:
        after = own_metrics(self.url)
        if self.victoria_metrics:
            rows = "vm_rows_added_to_storage_total"
            stored_rows = total(after, "vm_rows")
            return {
                "internals": {
                    name: total(after, name, **labels) - total(self._before, name, **labels)
                    for name, labels in VM_INTERNALS
                }
                | {"select_capacity": total(after, "vm_concurrent_select_capacity")},
                "active_series": total(after, "vm_cache_entries", type="storage/hour_metric_ids"),
                "samples_per_second": round(
                    (total(after, rows) - total(self._before, rows)) / window, 1
                ),
                # Over minutes most samples are still in small, fresh parts: not the ratio of
                # a store that has merged days of them.
                "bytes_per_sample_so_far": round(
                    total(after, "vm_data_size_bytes") / stored_rows, 2
                )
                if stored_rows
                else None,
            }
        appended = "prometheus_tsdb_head_samples_appended_total"
        return {
            "active_series": total(after, "prometheus_tsdb_head_series"),
            "samples_per_second": round(
                (total(after, appended) - total(self._before, appended)) / window, 1
            ),
            "bytes_per_sample_so_far": None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    parser.add_argument("--hosts", type=int, default=HOSTS)
    # One exporter process per host by default; fewer, each scraped as several hosts, on a
    # machine that cannot hold 64 (the series are the same, only `host` differs).
    parser.add_argument("--exporters", type=int, default=HOSTS)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--gpus-per-host", type=int, default=GPUS_PER_HOST)
    parser.add_argument("--hosts-per-run", type=int, default=8)
    parser.add_argument("--no-training", action="store_true")
    parser.add_argument("--rules", type=Path, default=RULES)
    parser.add_argument("--evaluator", choices=EVALUATORS, default="both")
    parser.add_argument(
        "--no-prometheus", action="store_true", help="the same as --evaluator victoriametrics"
    )
    parser.add_argument("--time-rules", action="store_true")
    # With --time-rules on VictoriaMetrics: each rule asked at these `step`s too.
    parser.add_argument("--compare-step", action="append", default=[], metavar="DURATION")
    # Flags beyond deploy/fleet/central.compose.yml's, to measure one before it goes there.
    parser.add_argument("--store-flag", action="append", default=[], metavar="-FLAG=VALUE")
    parser.add_argument("--vmalert-flag", action="append", default=[], metavar="-FLAG=VALUE")
    # The dashboards ask the central store, VictoriaMetrics (docs/fleet.md), or the Prometheus
    # of --evaluator prometheus; the comparison Prometheus too with this (twice the time).
    parser.add_argument("--dashboards-on-prometheus", action="store_true")
    # The rule groups alone (a trial of a flag or a rule): minutes less on VictoriaMetrics.
    parser.add_argument("--no-dashboards", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("build/scale-bench"))
    args = parser.parse_args()
    if not 1 <= args.gpus_per_host <= 64:
        parser.error(f"--gpus-per-host {args.gpus_per_host}: the exporter simulates 1..64 GPUs")
    if args.no_prometheus and args.evaluator == "prometheus":
        parser.error("--no-prometheus: --evaluator prometheus runs Prometheus alone")
    evaluator = "victoriametrics" if args.no_prometheus else args.evaluator
    with_vm = evaluator != "prometheus"
    with_prometheus = evaluator != "victoriametrics"
    rules: Path = args.rules.resolve()
    if not rules.is_file():
        parser.error(f"--rules {args.rules}: no such file")
    workdir: Path = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)

    store, prometheus, vmalert, alertmanager = loopback(), loopback(), loopback(), loopback()
    exporters: list[Address] = []
    write_urls = [f"{store.url}/api/v1/write"]
    if with_prometheus:
        write_urls.append(f"{prometheus.url}/api/v1/write")
    # Where the store figures and the dashboards are asked: VictoriaMetrics, else Prometheus.
    asked = store if with_vm else prometheus
    with Processes() as processes:
        started: dict[str, Process] = {}
        if with_vm:
            vm_process = victoria_metrics_process(workdir, store)
            vm_process.args += args.store_flag
            started["victoria-metrics"] = processes.start(vm_process, f"{store.url}/health")
        if with_vm and with_prometheus:
            started["prometheus (central, comparison)"] = processes.start(
                central_prometheus_process(workdir, rules, prometheus, EVALUATION_INTERVAL),
                f"{prometheus.url}/-/ready",
            )
        for i in range(args.exporters):
            address, process = start_simulated_exporter(
                processes,
                workdir,
                f"exporter-{i}",
                "healthy",
                ["--gpus", str(args.gpus_per_host), "--log-level", "warning"],
            )
            exporters.append(address)
            started[process.name] = process
        if not with_vm:
            config = write_yaml(
                workdir / "prometheus.yml", prometheus_config(exporters, args.hosts, rules)
            )
            started["prometheus"] = processes.start(
                prometheus_process(workdir, config, prometheus), f"{prometheus.url}/-/ready"
            )
        else:
            config = write_yaml(workdir / "vmagent.yml", vmagent_config(exporters, args.hosts))
            agent = loopback()
            started["vmagent"] = processes.start(
                Process(
                    "vmagent",
                    [
                        binary("vmagent"),
                        f"-promscrape.config={config}",
                        *(f"-remoteWrite.url={u}" for u in write_urls),
                        f"-remoteWrite.tmpDataPath={workdir / 'vmagent-data'}",
                        f"-httpListenAddr={agent}",
                        "-loggerLevel=WARN",
                    ],
                    workdir / "vmagent.log",
                ),
                f"{agent.url}/health",
            )
            # No Alertmanager: nothing fires on healthy hosts but Watchdog, and its delivery
            # is not what is measured; vmalert only logs that it cannot send.
            evaluator_process = vmalert_process(
                workdir, rules, store, alertmanager, vmalert, EVALUATION_INTERVAL
            )
            evaluator_process.args += args.vmalert_flag
            started["vmalert"] = processes.start(evaluator_process, f"{vmalert.url}/health")
        training = None
        if not args.no_training:
            training = TrainingLoad(workers(exporters, args.hosts_per_run))
            training.start()
        print(f"warming up {args.warmup:.0f} s", flush=True)
        time.sleep(args.warmup)

        cpu_before = {name: cpu_seconds(p.pid or 0) for name, p in started.items()}
        counters = StoreCounters(asked.url, with_vm)
        load_before = load_average()
        group_times = GroupTimes(
            vmalert.url if with_vm else None, prometheus.url if with_prometheus else None
        )
        group_times.start()
        window_start = time.time()
        print(f"measuring {args.seconds:.0f} s", flush=True)
        time.sleep(args.seconds)
        window = time.time() - window_start
        group_times.stop()
        load_after = load_average()
        store_figures = counters.figures(window)
        cpu_after = {name: cpu_seconds(p.pid or 0) for name, p in started.items()}
        memory = {name: rss_bytes(p.pid or 0) for name, p in started.items()}
        for name, process in started.items():
            assert process.alive(), f"{name} died:\n{process.log_tail()}"

        series_by_metric = store_series(asked.url, with_vm)
        all_series = sum(series_by_metric.values())
        gpu_series = sum(n for k, n in series_by_metric.items() if k.startswith("mirrorwatch_gpu_"))
        recorded = sum(n for k, n in series_by_metric.items() if ":" in k)
        training_series = sum(
            n for k, n in series_by_metric.items() if k.startswith("mirrorwatch_training_")
        )
        up_targets = scalar(asked.url, 'count(up{job="mirrorwatch"} == 1)')
        gpus = scalar(asked.url, 'count(mirrorwatch_gpu_info{job="mirrorwatch"})')

        evaluations = group_times.summary()
        prometheus_series = None
        if with_vm and with_prometheus:
            prometheus_series = total(own_metrics(prometheus.url), "prometheus_tsdb_head_series")
        end = time.time()
        start = max(end - 3600, window_start - args.warmup)
        one_host = {"host": "host-00", "instance": "host-00"}
        if training is not None:
            one_host["run"] = "scale-0"
        dashboards = (
            {}
            if args.no_dashboards
            else {
                "fleet": dashboard_panels(asked.url, "Fleet", {}, start, end),
                "training_balance_one_host": dashboard_panels(
                    asked.url, "Training balance", one_host, start, end
                ),
                "gpu_host_one_host": dashboard_panels(asked.url, "GPU host", one_host, start, end),
            }
        )
        if args.dashboards_on_prometheus and with_vm and with_prometheus:
            dashboards["fleet_on_prometheus"] = dashboard_panels(
                prometheus.url, "Fleet", {}, start, end
            )
            dashboards["training_balance_one_host_on_prometheus"] = dashboard_panels(
                prometheus.url, "Training balance", one_host, start, end
            )
            dashboards["gpu_host_one_host_on_prometheus"] = dashboard_panels(
                prometheus.url, "GPU host", one_host, start, end
            )
        rule_query_seconds = {}
        if args.time_rules:
            # Each expression on its own, vmalert and the comparison Prometheus stopped (after
            # the dashboards, timed beside them): what a rule costs the store, queueing apart.
            for name in ("vmalert", "prometheus (central, comparison)"):
                if name in started:
                    started[name].stop()
            if with_vm:
                rule_query_seconds["victoriametrics"] = rule_query_times(
                    store.url, rules, query_step(evaluator_process.args), args.compare_step
                )
            if with_prometheus and not with_vm:
                rule_query_seconds["prometheus"] = rule_query_times(prometheus.url, rules)
        if training is not None:
            training.stop()
            assert not training.rejected, f"pushes refused: {training.rejected}"
        data = workdir / ("vm-data" if with_vm else "prometheus-data")
        disk = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())

    stack = {
        "both": "VictoriaMetrics single-node (vmagent, vmalert) and a comparison Prometheus "
        "(remote-write receiver) on the same cores",
        "victoriametrics": "VictoriaMetrics single-node, vmagent, vmalert alone",
        "prometheus": "a Prometheus alone, scraping and evaluating",
    }[evaluator]
    report: dict[str, Any] = {
        "benchmark": f"scale: {args.hosts} simulated GPU hosts x {args.gpus_per_host} GPUs, "
        f"{stack} (bench/scale_bench.py; docs/scale.md)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            **machine(),
            "note": "shared with other jobs while measured unless the load average says not: "
            "CPU figures are the share each process got",
            "load_average_before_window": load_before,
            "load_average_after_window": load_after,
        },
        "setup": {
            "hosts": args.hosts,
            "gpus_per_host": args.gpus_per_host,
            "gpus": args.hosts * args.gpus_per_host,
            "rules": str(args.rules),
            "training": None
            if training is None
            else f"every GPU a replica; runs of {args.hosts_per_run} hosts; "
            f"workers of up to 16 replicas pushing every 15 s",
            "exporter_processes": args.exporters,
            "targets_per_exporter": args.hosts / args.exporters,
            "scenario": "healthy",
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
            "evaluator": evaluator,
            "stack": stack,
            "agents": "one vmagent scraping all targets (host from target labels)"
            if with_vm
            else "the Prometheus scrapes all targets (host and cluster from target labels)",
            "central_prometheus": with_prometheus,
            "victoria_metrics": "Debian victoria-metrics 1.79.5 (victoria-metrics, vmagent, "
            "vmalert)"
            if with_vm
            else None,
            "extra_flags": {"victoria-metrics": args.store_flag, "vmalert": args.vmalert_flag},
            "warmup_seconds": args.warmup,
            "measured_seconds": round(window, 1),
        },
        "store": {
            "asked": "victoria-metrics" if with_vm else "prometheus",
            "targets_up": up_targets,
            "gpus": gpus,
            "active_series": store_figures["active_series"],
            "series_all": all_series,
            "series_gpu_metrics": gpu_series,
            "series_recording_rules": recorded,
            "series_per_gpu": round(gpu_series / gpus, 1) if gpus else None,
            "series_training": training_series,
            "series_training_per_gpu": round(training_series / gpus, 1) if gpus else None,
            "series_recording_rules_per_gpu": round(recorded / gpus, 1) if gpus else None,
            "series_per_host_not_per_gpu": round(
                (all_series - gpu_series - recorded - training_series) / args.hosts, 1
            ),
            "samples_per_second": store_figures["samples_per_second"],
            "disk_bytes_after_run": disk,
            "bytes_per_sample_so_far": store_figures["bytes_per_sample_so_far"],
            "internals_over_window": store_figures.get("internals"),
            "series_by_metric": series_by_metric,
        },
        "rule_evaluation_vmalert": evaluations.get("vmalert", {}),
        "rule_evaluation_prometheus": evaluations.get("prometheus", {}),
        "prometheus_head_series": prometheus_series,
        "rule_evaluation_seconds_by_rule": group_times.rule_summary(),
        "rule_query_seconds": rule_query_seconds,
        "dashboard_panels": dashboards,
        "processes": {
            name: {
                **memory[name],
                "cpu_cores_used": round((cpu_after[name] - cpu_before[name]) / window, 4),
            }
            for name in started
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(
        json.dumps({k: v for k, v in report["store"].items() if k != "series_by_metric"}, indent=2)
    )
    print(json.dumps(evaluations, indent=2))
    for name, rules_seen in group_times.rule_summary().items():
        print(name, json.dumps(rules_seen[:10], indent=1))
    print(json.dumps({name: panels[:2] for name, panels in dashboards.items()}, indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
