"""The report's examples per second, evaluated by Prometheus's own evaluator (promtool).

A worker pushes every 10 s, Prometheus scrapes every 15 s: each sample carries the totals and
the receive time of the last push before it. rate() over the scrape times aliases against
the pushes; the report's query divides by the push times and gets the trainer's true pace.
A worker whose counter restarted in the range falls back to rate().
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mirrorwatch.alerts.promql import Select
from mirrorwatch.alerts.training_queries import (
    examples_per_second_between_pushes,
    examples_per_second_from_counter,
)
from mirrorwatch.contract.metrics import (
    TRAINING_EXAMPLES_TOTAL,
    TRAINING_LAST_PUSH_TIMESTAMP_SECONDS,
)
from tests.alerts.tools import promtool_expr_test

SCRAPE_SECONDS = 15
PUSH_SECONDS = 10
END_SECONDS = 300
# The window ends between scrapes and starts between them: the same samples in either range
# semantics (Prometheus 2's closed start, 3's open one).
EVAL_SECONDS, WINDOW = 125, "120s"


def scraped(first_push: int, examples_at: Callable[[int], float]) -> tuple[str, str]:
    """promtool values every SCRAPE_SECONDS of a worker pushing every PUSH_SECONDS from
    ``first_push``: its examples total and its last push's time, `_` before the first."""
    totals, pushes = [], []
    for t in range(0, END_SECONDS + 1, SCRAPE_SECONDS):
        if t < first_push:
            totals.append("_")
            pushes.append("_")
            continue
        pushed = first_push + (t - first_push) // PUSH_SECONDS * PUSH_SECONDS
        totals.append(f"{examples_at(pushed):g}")
        pushes.append(str(pushed))
    return " ".join(totals), " ".join(pushes)


def worker(
    run_name: str, index: int, first_push: int, examples_at: Callable[[int], float]
) -> list[dict[str, str]]:
    labels = f'job="mirrorwatch", instance="h1:9848", run="{run_name}", worker="{index}"'
    totals, pushes = scraped(first_push, examples_at)
    return [
        {"series": f"{TRAINING_EXAMPLES_TOTAL}{{{labels}}}", "values": totals},
        {"series": f"{TRAINING_LAST_PUSH_TIMESTAMP_SECONDS}{{{labels}}}", "values": pushes},
    ]


def restarted(pushed: int) -> float:
    """100 examples/s, and a new session at 63 s that counts again from 0."""
    return 100.0 * (pushed if pushed < 60 else pushed - 60)


SERIES = [
    # A DDP run: two workers, 100 and 50 examples a second, pushing 4 s apart.
    *worker("ddp", 0, 3, lambda p: 100.0 * p),
    *worker("ddp", 1, 7, lambda p: 50.0 * p),
    *worker("restarted", 0, 3, restarted),
]


def failures(tmp_path: Path, cases: list[tuple[str, list[dict[str, Any]]]]) -> str:
    return promtool_expr_test(
        tmp_path / "throughput.yml",
        f"{SCRAPE_SECONDS}s",
        SERIES,
        [
            {"expr": expr, "eval_time": f"{EVAL_SECONDS}s", "exp_samples": expected}
            for expr, expected in cases
        ],
    )


def of(run_name: str) -> Select:
    return Select((f'run="{run_name}"',))


def test_the_pace_between_pushes_is_exact_where_rate_aliases(tmp_path: Path) -> None:
    exact = examples_per_second_between_pushes(of("ddp"), WINDOW)
    counted = examples_per_second_from_counter(of("ddp"), WINDOW)
    assert not failures(
        tmp_path,
        [
            # Both workers' paces, summed: 100 + 50.
            (exact, [{"labels": '{run="ddp"}', "value": 150}]),
            # rate() over the same samples: 1300 -> 11300 and 350 -> 5850 over 105 s of scrapes,
            # extrapolated to the window: 147.6, not 150.
            (f"{counted} < bool 149", [{"labels": '{run="ddp"}', "value": 1}]),
        ],
    )


def test_a_restarted_counter_falls_back_to_rate(tmp_path: Path) -> None:
    exact = examples_per_second_between_pushes(of("restarted"), WINDOW)
    counted = examples_per_second_from_counter(of("restarted"), WINDOW)
    # Across the restart, max - min of the totals would mean nothing; rate() counts the reset.
    assert not failures(
        tmp_path, [(f"({exact}) - ({counted})", [{"labels": '{run="restarted"}', "value": 0}])]
    )
