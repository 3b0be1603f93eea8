"""TLS benchmark: the exporter's CPU per scrape over https with basic auth, beside plain HTTP.

8 simulated GPUs, the headers Prometheus sends (bench/peers_bench.py). Prometheus keeps its
connection open, so the steady cost is a scrape on one keep-alive connection: the handshake is
paid once. A fresh connection per scrape (a handshake each, e.g. a scraper without keep-alive)
is measured too. Basic auth costs one bcrypt round per connection's first request at most:
outcomes are cached (exporter/basic_auth.py). The CA and certificate are made for the run.

    python bench/tls_bench.py --out bench/results/tls.json
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.exporter_bench import process_cpu_seconds
from bench.machine import machine
from bench.peers_bench import MODES
from tests.exporter.certificates import Authority, bcrypt_hash, write_web_config
from tests.exporter.exporter_process import running_exporter

GPUS = 8
PASSWORD = "bench"  # a throwaway password for a throwaway exporter
# TLS on a kept connection should cost little beside the render: at most this much more CPU.
TARGETS = {"keep_alive_tls_ratio": 1.3}


def cpu_ms_per_scrape(pid: int, scrapes: int, scrape: Any) -> float:
    for _ in range(20):  # warm up: first-call caches, the bcrypt round, the handshake
        scrape()
    before = process_cpu_seconds(pid)
    for _ in range(scrapes):
        scrape()
    return (process_cpu_seconds(pid) - before) / scrapes * 1000


def measure(folder: Path, scrapes: int) -> dict[str, Any]:
    authority = Authority.create(folder)
    server = authority.issue("exporter")
    web_config = write_web_config(
        folder / "web-config.yml",
        {
            "tls_server_config": {"cert_file": str(server.cert), "key_file": str(server.key)},
            "basic_auth_users": {"prometheus": bcrypt_hash(PASSWORD)},
        },
    )
    context = ssl.create_default_context(cafile=authority.cert)
    headers = MODES["prometheus"]
    base = ["--simulate", "healthy", "--gpus", str(GPUS), "--log-level", "warning"]
    rows: dict[str, float] = {}
    with running_exporter(base, wait_for="/readyz") as plain, httpx.Client() as client:
        rows["plain_keep_alive"] = cpu_ms_per_scrape(
            plain.process.pid,
            scrapes,
            lambda: client.get(plain.url + "/metrics", headers=headers).raise_for_status(),
        )
    auth = ("prometheus", PASSWORD)
    with (
        httpx.Client(verify=context, auth=auth) as client,
        running_exporter(
            [*base, "--web-config-file", str(web_config)], scheme="https", client=client
        ) as tls,
    ):
        rows["tls_basic_auth_keep_alive"] = cpu_ms_per_scrape(
            tls.process.pid,
            scrapes,
            lambda: client.get(tls.url + "/metrics", headers=headers).raise_for_status(),
        )

        def fresh_connection() -> None:
            with httpx.Client(verify=context, auth=auth) as once:
                once.get(tls.url + "/metrics", headers=headers).raise_for_status()

        rows["tls_basic_auth_new_connection"] = cpu_ms_per_scrape(
            tls.process.pid, max(scrapes // 5, 20), fresh_connection
        )
    return {key: round(value, 3) for key, value in rows.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/tls.json"))
    parser.add_argument("--scrapes", type=int, default=500)
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        cpu = measure(Path(folder), args.scrapes)
    load_after = os.getloadavg()
    ratio = cpu["tls_basic_auth_keep_alive"] / cpu["plain_keep_alive"]
    result = {
        "benchmark": f"exporter /metrics CPU, {GPUS} simulated GPUs: https + basic auth vs plain",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "scrapes": args.scrapes,
        "headers": MODES["prometheus"],
        "cpu_ms_per_scrape": cpu,
        "keep_alive_tls_ratio": round(ratio, 2),
        "targets": TARGETS,
        "met": {"keep_alive_tls_ratio": ratio <= TARGETS["keep_alive_tls_ratio"]},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for key, value in cpu.items():
        print(f"{key:>32} {value:>8} ms CPU per scrape")
    print(f"keep-alive TLS / plain: {ratio:.2f} (target <= {TARGETS['keep_alive_tls_ratio']})")
    print(f"load average {load_before} -> {load_after}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
