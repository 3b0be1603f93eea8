"""Scale benchmark: 64 simulated GPU hosts x 8 GPUs (512 GPUs) into the central store.

What runs (all real binaries, Debian's): `--exporters` simulated exporters with `--gpus 8`,
each scraped as 64 / exporters hosts (targets with their own `host`, `instance` and the
`cluster` label, as 64 per-host agents would write them); one vmagent scraping the 64 targets
every 15 s (deploy/fleet/vmagent/scrape.yml's interval) and remote-writing to VictoriaMetrics
single-node and, unless --no-prometheus, to a Prometheus with the remote-write receiver;
vmalert evaluating the production rules (alerts/mirrorwatch.rules.yml, every 15 s) against
VictoriaMetrics, the Prometheus evaluating the same file. After --warmup seconds, the steady
window of --seconds is measured:

- active series at the store, per GPU and per host; samples/s ingested;
- rule evaluation time per group (vmalert; Prometheus for comparison);
- the query time of every Fleet dashboard panel as Grafana asks it (tables: instant queries;
  graphs: range queries over the run at a 15 s step), the heaviest named;
- RSS and CPU time of every process.

    python bench/scale_bench.py --out bench/results/scale.json
    python bench/scale_bench.py --seconds 60 --warmup 60 --out /tmp/scale.json   # a trial
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
QUERY_REPEATS = 5
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
            {
                "job_name": job["job_name"],
                "static_configs": [
                    {
                        "targets": [str(exporters[i % len(exporters)])],
                        "labels": {"host": f"host-{i:02d}", "instance": f"host-{i:02d}"},
                    }
                    for i in range(hosts)
                ],
            }
        ],
    }


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


def group_names(metrics: Mapping[str, float], name: str, label: str) -> list[str]:
    found = set()
    for key in metrics:
        if key.startswith(name + "{") and f'{label}="' in key:
            found.add(key.split(f'{label}="', 1)[1].split('"', 1)[0])
    return sorted(found)


def time_query(url: str, path: str, params: Mapping[str, str]) -> tuple[float, int]:
    """Median seconds of QUERY_REPEATS asks, and the series the answer holds."""
    times = []
    series = 0
    for _ in range(QUERY_REPEATS):
        started = time.perf_counter()
        response = httpx.get(f"{url}{path}", params={**params, "nocache": "1"}, timeout=120)
        times.append(time.perf_counter() - started)
        body = response.json()
        assert body["status"] == "success", body
        series = len(body["data"]["result"])
    return statistics.median(times), series


def fleet_panels(url: str, start: float, end: float) -> list[dict[str, Any]]:
    (dashboard,) = (d for d in load_dashboards().values() if d["title"] == "Fleet")
    variables = {
        "job": ".*",
        "instance": ".*",
        "gpu": ".*",
        "run": ".*",
        "datasource": "prometheus",
        # Grafana's $__rate_interval for a 15 s data source interval: 4 x 15 s.
        "__rate_interval": "1m",
    }
    measured = []
    for panel in panels(dashboard):
        seconds = 0.0
        series = 0
        for target in panel.get("targets", []):
            expr = expand(target["expr"], variables)
            if target.get("instant"):
                took, found = time_query(url, "/api/v1/query", {"query": expr, "time": f"{end}"})
            else:
                params = {"query": expr, "start": f"{start}", "end": f"{end}", "step": "15"}
                took, found = time_query(url, "/api/v1/query_range", params)
            seconds += took
            series += found
        if panel.get("targets"):
            measured.append(
                {
                    "panel": panel["title"],
                    "queries": len(panel["targets"]),
                    "seconds_sum_of_medians": round(seconds, 4),
                    "series_returned": series,
                }
            )
    return sorted(measured, key=lambda p: -float(p["seconds_sum_of_medians"]))


def rule_times(url: str, evaluator: str, top: int = 8) -> list[dict[str, Any]]:
    """The slowest rules of their last evaluation, from `evaluationTime` of the evaluator's
    Prometheus-compatible /api/v1/rules (Prometheus and vmalert both serve it)."""
    body = httpx.get(f"{url}/api/v1/rules", timeout=30).json()
    rules = []
    for group in body["data"]["groups"]:
        for rule in group["rules"]:
            seconds = rule.get("evaluationTime")
            if isinstance(seconds, int | float):
                rules.append(
                    {
                        "evaluator": evaluator,
                        "group": group["name"],
                        "rule": rule["name"],
                        "seconds": round(float(seconds), 4),
                    }
                )
    return sorted(rules, key=lambda r: -float(r["seconds"]))[:top]


# --- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/scale.json"))
    parser.add_argument("--hosts", type=int, default=HOSTS)
    # One exporter process per host by default; fewer, each scraped as several hosts, on a
    # machine that cannot hold 64 (the series are the same, only `host` differs).
    parser.add_argument("--exporters", type=int, default=HOSTS)
    parser.add_argument("--warmup", type=float, default=120.0)
    parser.add_argument("--seconds", type=float, default=240.0)
    parser.add_argument("--no-prometheus", action="store_true")
    parser.add_argument("--workdir", type=Path, default=Path("build/scale-bench"))
    args = parser.parse_args()
    workdir: Path = args.workdir.resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)

    store, prometheus, vmalert, alertmanager = loopback(), loopback(), loopback(), loopback()
    exporters: list[Address] = []
    write_urls = [f"{store.url}/api/v1/write"]
    if not args.no_prometheus:
        write_urls.append(f"{prometheus.url}/api/v1/write")
    with Processes() as processes:
        started: dict[str, Process] = {}
        started["victoria-metrics"] = processes.start(
            victoria_metrics_process(workdir, store), f"{store.url}/health"
        )
        if not args.no_prometheus:
            started["prometheus (central, comparison)"] = processes.start(
                central_prometheus_process(workdir, RULES, prometheus, EVALUATION_INTERVAL),
                f"{prometheus.url}/-/ready",
            )
        for i in range(args.exporters):
            address, process = start_simulated_exporter(
                processes,
                workdir,
                f"exporter-{i}",
                "healthy",
                ["--gpus", str(GPUS_PER_HOST), "--log-level", "warning"],
            )
            exporters.append(address)
            started[process.name] = process
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
        # No Alertmanager: nothing fires on healthy hosts but Watchdog, and its delivery is
        # not what is measured; vmalert only logs that it cannot send.
        started["vmalert"] = processes.start(
            vmalert_process(workdir, RULES, store, alertmanager, vmalert, EVALUATION_INTERVAL),
            f"{vmalert.url}/health",
        )
        print(f"warming up {args.warmup:.0f} s", flush=True)
        time.sleep(args.warmup)

        cpu_before = {name: cpu_seconds(p.pid or 0) for name, p in started.items()}
        vm_before, vmalert_before = own_metrics(store.url), own_metrics(vmalert.url)
        window_start = time.time()
        print(f"measuring {args.seconds:.0f} s", flush=True)
        time.sleep(args.seconds)
        window = time.time() - window_start
        vm_after, vmalert_after = own_metrics(store.url), own_metrics(vmalert.url)
        cpu_after = {name: cpu_seconds(p.pid or 0) for name, p in started.items()}
        memory = {name: rss_bytes(p.pid or 0) for name, p in started.items()}
        for name, process in started.items():
            assert process.alive(), f"{name} died:\n{process.log_tail()}"

        rows = "vm_rows_added_to_storage_total"
        samples_per_second = (total(vm_after, rows) - total(vm_before, rows)) / window
        active = total(vm_after, "vm_cache_entries", type="storage/hour_metric_ids")
        gpu_series = scalar(store.url, 'count({__name__=~"mirrorwatch_gpu_.+"})')
        all_series = scalar(store.url, 'count({__name__=~".+"})')
        recorded = scalar(store.url, 'count({__name__=~".+:.+"})')
        up_targets = scalar(store.url, 'count(up{job="mirrorwatch"} == 1)')
        gpus = scalar(store.url, 'count(mirrorwatch_gpu_info{job="mirrorwatch"})')

        by_metric = httpx.get(
            f"{store.url}/api/v1/query",
            params={"query": 'count by (__name__) ({__name__=~"mirrorwatch_.+"})', "nocache": "1"},
            timeout=60,
        ).json()["data"]["result"]
        series_by_metric = dict(
            sorted(
                ((r["metric"]["__name__"], int(r["value"][1])) for r in by_metric),
                key=lambda item: -item[1],
            )
        )
        stored_bytes = total(vm_after, "vm_data_size_bytes")
        stored_rows = total(vm_after, "vm_rows")

        groups = {}
        name = "vmalert_iteration_duration_seconds"
        for group in group_names(vmalert_after, f"{name}_count", "group"):
            count = total(vmalert_after, f"{name}_count", group=group) - total(
                vmalert_before, f"{name}_count", group=group
            )
            seconds = total(vmalert_after, f"{name}_sum", group=group) - total(
                vmalert_before, f"{name}_sum", group=group
            )
            groups[group] = {
                "evaluations": int(count),
                "mean_seconds": round(seconds / count, 4) if count else None,
            }
        prometheus_groups = {}
        prometheus_series = None
        if not args.no_prometheus:
            prom = own_metrics(prometheus.url)
            prometheus_series = total(prom, "prometheus_tsdb_head_series")
            for key, value in prom.items():
                if key.startswith("prometheus_rule_group_last_duration_seconds{"):
                    group = key.split('rule_group="', 1)[1].split('"', 1)[0].rsplit(";", 1)[-1]
                    prometheus_groups[group] = {"last_seconds": round(value, 4)}

        slowest_rules = rule_times(vmalert.url, "vmalert")
        if not args.no_prometheus:
            slowest_rules += rule_times(prometheus.url, "prometheus")

        end = time.time()
        start = max(end - 3600, window_start - args.warmup)
        panel_times = fleet_panels(store.url, start, end)
        disk = sum(f.stat().st_size for f in (workdir / "vm-data").rglob("*") if f.is_file())

    report = {
        "benchmark": f"scale: {args.hosts} simulated GPU hosts x {GPUS_PER_HOST} GPUs into "
        "VictoriaMetrics single-node, rules by vmalert (bench/scale_bench.py; docs/scale.md)",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            **machine(),
            "note": "shared with other jobs while measured: CPU figures are upper bounds",
        },
        "setup": {
            "hosts": args.hosts,
            "gpus_per_host": GPUS_PER_HOST,
            "exporter_processes": args.exporters,
            "targets_per_exporter": args.hosts / args.exporters,
            "scenario": "healthy",
            "scrape_interval": SCRAPE_INTERVAL,
            "evaluation_interval": EVALUATION_INTERVAL,
            "agents": "one vmagent scraping all targets (host from target labels)",
            "central_prometheus": not args.no_prometheus,
            "victoria_metrics": "Debian victoria-metrics 1.79.5 (victoria-metrics, vmagent, "
            "vmalert)",
            "warmup_seconds": args.warmup,
            "measured_seconds": round(window, 1),
        },
        "store": {
            "targets_up": up_targets,
            "gpus": gpus,
            "active_series": active,
            "series_all": all_series,
            "series_gpu_metrics": gpu_series,
            "series_recording_rules": recorded,
            "series_per_gpu": round(gpu_series / gpus, 1) if gpus else None,
            "series_per_host_not_per_gpu": round(
                (all_series - gpu_series - recorded) / args.hosts, 1
            ),
            "samples_per_second": round(samples_per_second, 1),
            "disk_bytes_after_run": disk,
            # Over minutes most samples are still in small, fresh parts: not the ratio of a
            # store that has merged days of them.
            "bytes_per_sample_so_far": round(stored_bytes / stored_rows, 2)
            if stored_rows
            else None,
            "series_by_metric": series_by_metric,
        },
        "rule_evaluation_vmalert": groups,
        "rule_evaluation_prometheus": prometheus_groups,
        "prometheus_head_series": prometheus_series,
        "slowest_rules_last_evaluation": slowest_rules,
        "fleet_dashboard_panels": panel_times,
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
    print(json.dumps(report["store"], indent=2))
    print(json.dumps(panel_times[:3], indent=2))
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
