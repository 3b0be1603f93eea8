"""The headline: how long the run was, how fast it went, and how far from ideal scaling."""

from __future__ import annotations

from typing import Any

from mirrorwatch.alerts import queries as q
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.report.evidence import Ask
from mirrorwatch.report.scope import format_time


def headline(ask: Ask, t: Thresholds) -> dict[str, Any]:
    s = ask.scope
    run = s.run_select
    queries = {
        "mean_utilization": f"avg ({q.gpu_utilization_mean(s.gpus_select, s.window)})",
    }
    if s.run is not None:
        queries |= {
            "steps": q.training_steps(run, s.window),
            "examples_per_second": q.examples_per_second_from_counter(run, s.window),
            "step_time_p50_seconds": q.step_time_quantile(run, 0.5, s.window),
            "replicas": f"max ({q.replicas(run)})",
            "speedup": q.scaling(run, "speedup", s.window),
            "scaling_efficiency": q.scaling(run, "efficiency_ratio", s.window),
        }
    values = {name: ask.one(query) for name, query in queries.items()}
    target = t.TrainingScalingEfficiencyLow.efficiency_ratio
    replicas = values.get("replicas")
    speedup = values.get("speedup")
    efficiency = values.get("scaling_efficiency")
    result: dict[str, Any] = {
        "run": s.run,
        "instances": list(s.instances),
        "gpus": [
            {"instance": g.instance, "gpu": g.gpu, "uuid": g.uuid, "name": g.name} for g in s.gpus
        ],
        "start": s.start,
        "end": s.end,
        "start_text": format_time(s.start),
        "end_text": format_time(s.end),
        "duration_seconds": s.seconds,
        "step_seconds": s.step,
        **values,
        "ideal_speedup": replicas,
        "efficiency_target": target,
        "speedup_at_target": replicas * target if replicas else None,
        "meets_target": None if efficiency is None else efficiency >= target,
        "queries": queries,
    }
    result["verdict"] = verdict(speedup, replicas, efficiency, target)
    return result


def verdict(
    speedup: float | None, replicas: float | None, efficiency: float | None, target: float
) -> str:
    """The headline's sentence on scaling, or why there is none."""
    if speedup is None or efficiency is None or not replicas:
        return "No scaling figures: the trainer reported no single-replica baseline."
    ideal = f"{replicas:.0f}x"
    if efficiency >= target:
        return (
            f"{speedup:.2f}x on {replicas:.0f} GPUs: {efficiency:.0%} of ideal ({ideal}), "
            f"meeting the {target:.0%} target."
        )
    return (
        f"{speedup:.2f}x on {replicas:.0f} GPUs instead of {replicas * target:.2f}x: "
        f"{efficiency:.0%} of ideal ({ideal}), below the {target:.0%} target."
    )
