"""Generate the dashboards' JSON into dashboards/json (`make dashboards`); `--check` for drift."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dashboards import fleet, host, training
from dashboards.layout import render
from mirrorwatch.alerts.thresholds import Thresholds, load_thresholds

JSON_DIR = Path(__file__).resolve().parent / "json"

# File name -> builder. The file names are what Grafana's file provider loads and what
# GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH points at, so they stay fixed.
DASHBOARDS: dict[str, Callable[[Thresholds], dict[str, Any]]] = {
    "training-balance.json": training.dashboard,
    "gpu-host.json": host.dashboard,
    "fleet.json": fleet.dashboard,
}
HOME = "training-balance.json"


def generate(thresholds: Thresholds | None = None) -> dict[str, str]:
    """File name -> JSON text of every dashboard, built fresh from the sources and the alert
    thresholds (the limits their panels draw and their descriptions name)."""
    thresholds = thresholds or load_thresholds()
    return {name: render(builder(thresholds)) for name, builder in DASHBOARDS.items()}


def stale_files(out: Path = JSON_DIR) -> list[str]:
    """Files in ``out`` that differ from a fresh build, are missing, or no longer built."""
    fresh = generate()
    present = {path.name for path in out.glob("*.json")}
    problems = [
        name
        for name, text in fresh.items()
        if name not in present or (out / name).read_text(encoding="utf-8") != text
    ]
    problems.extend(sorted(present - fresh.keys()))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=JSON_DIR, help="folder for the JSON files")
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when the files differ from a fresh build"
    )
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out)
        for name in stale:
            print(f"{args.out / name}: differs from a fresh build; run `make dashboards`")
        return 1 if stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    fresh = generate()
    for path in args.out.glob("*.json"):
        if path.name not in fresh:
            path.unlink()
    for name, text in fresh.items():
        (args.out / name).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
