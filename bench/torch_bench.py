"""Torch monitor benchmark: what ``monitor.step`` costs a training loop, per step.

Inside a real PyTorch loop on CPU (a Dense 32-64-1 model, batch 64, SGD), each
``monitor.step(examples, loss)`` call is timed with ``perf_counter_ns`` around it and the
timer's own cost subtracted (target <= 20 us p50 in every mode, as the Keras callback's hooks);
the pusher thread pushes every 0.5 s to a loopback sink meanwhile, counting the steps that
``step`` queued; an empty method called the same way gives the floor any call there pays.
Measured with the loss as a tensor (kept only for the step after each push asks for one, read
on the pusher thread) and with no loss, in a plain loop and in a one-rank gloo
DistributedDataParallel loop whose all-reduces the monitor times (its comm hook runs inside
``backward()``, so the loop with and without ``attach`` is compared too, alternating, in one
run; CPU timings on this shared machine vary by about +-20%). The load average before and
after is recorded; on a loaded machine read the costs over the empty method's floor.

    python bench/torch_bench.py --out bench/results/torch.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.machine import machine
from tests.trainer.recorder import recording_exporter

TARGETS = {"step_us_p50": 20.0}
BATCH = 64


def model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def timer_floor_ns(samples: int = 100_000) -> float:
    """What two perf_counter_ns() calls around nothing cost: subtracted from each step."""
    costs = []
    for _ in range(samples):
        started = time.perf_counter_ns()
        costs.append(time.perf_counter_ns() - started)
    return statistics.median(costs)


def summary(costs_us: list[float]) -> dict[str, float]:
    costs = sorted(costs_us)
    return {
        "p50": round(costs[len(costs) // 2], 2),
        "p99": round(costs[int(len(costs) * 0.99)], 2),
        "mean": round(statistics.fmean(costs), 2),
        "steps": len(costs),
    }


class EmptyMonitor:
    """A monitor whose ``step`` does nothing: Python's cost of calling any method right after a
    training step, when torch has left the CPU caches cold (the floor under ``step``)."""

    def step(self, examples: int, loss: object = None) -> None:
        pass


def timed_loop(net: Any, monitor: Any, steps: int, with_loss: bool) -> tuple[list[float], float]:
    """Per-step cost of ``monitor.step`` in us (timer cost subtracted), and the loop's seconds."""
    import torch

    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    x, y = torch.randn(BATCH, 32), torch.randn(BATCH, 1)
    floor = timer_floor_ns(20_000)
    costs = []
    started = time.perf_counter()
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if monitor is None:
            continue
        before = time.perf_counter_ns()
        monitor.step(BATCH, loss if with_loss else None)
        costs.append(max(0.0, time.perf_counter_ns() - before - floor) / 1000)
    return costs, time.perf_counter() - started


def plain(url: str, steps: int) -> dict[str, Any]:
    from mirrorwatch.torch import MirrorwatchMonitor

    results: dict[str, Any] = {}
    for label, with_loss in (("loss_tensor", True), ("no_loss", False)):
        with MirrorwatchMonitor(url=url, run=f"bench-{label}", interval=0.5) as monitor:
            costs, _ = timed_loop(model(), monitor, steps, with_loss)
        results[label] = summary(costs[10:])  # the first steps warm the allocator
    costs, _ = timed_loop(model(), EmptyMonitor(), steps, True)
    results["empty_method_floor"] = summary(costs[10:])
    # The whole loop with and without the monitor, alternating: what the pusher's counting and
    # the loss it reads once a push cost the loop besides step() itself.
    ratios = []
    with MirrorwatchMonitor(url=url, run="bench-loop", interval=0.5) as monitor:
        for _ in range(5):
            with_monitor = timed_loop(model(), monitor, steps // 4, True)[1]
            without = timed_loop(model(), None, steps // 4, True)[1]
            ratios.append(with_monitor / without)
    results["loop_with_vs_without_monitor"] = {
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_min": round(min(ratios), 3),
        "ratio_max": round(max(ratios), 3),
        "steps_per_loop": steps // 4,
        "repetitions": 5,
    }
    return results


def ddp(url: str, steps: int, repetitions: int) -> dict[str, Any]:
    """One gloo rank: DDP runs its reducer and all-reduces exactly as with more ranks."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mirrorwatch.torch import MirrorwatchMonitor
    from tests.ports import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        with MirrorwatchMonitor(url=url, run="bench-ddp", interval=0.5) as monitor:
            attached = monitor.attach(DistributedDataParallel(model()))
            costs, _ = timed_loop(attached, monitor, steps, True)
            loop_with, loop_without = [], []
            plain_ddp = DistributedDataParallel(model())
            for _ in range(repetitions):  # alternating, so drifts in load hit both alike
                loop_with.append(timed_loop(attached, monitor, steps // 4, True)[1])
                loop_without.append(timed_loop(plain_ddp, None, steps // 4, True)[1])
        ratios = [w / wo for w, wo in zip(loop_with, loop_without, strict=True)]
        return {
            "step_us": summary(costs[10:]),
            "loop_with_vs_without_monitor": {
                "ratio_median": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "steps_per_loop": steps // 4,
                "repetitions": repetitions,
            },
        }
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/torch.json"))
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    load_before = os.getloadavg()
    with recording_exporter() as sink:
        loop = plain(sink.url, args.steps)
        distributed = ddp(sink.url, args.steps, args.repetitions)
    load_after = os.getloadavg()
    loads = {
        "before": [round(value, 2) for value in load_before],
        "after": [round(value, 2) for value in load_after],
    }
    target = TARGETS["step_us_p50"]
    modes = {
        "plain_loss_tensor": loop["loss_tensor"],
        "plain_no_loss": loop["no_loss"],
        "ddp_loss_tensor": distributed["step_us"],
    }
    floor = loop["empty_method_floor"]["p50"]
    result = {
        "benchmark": "torch",
        "machine": {**machine(), "torch": torch.__version__},
        "load_average_1_5_15_min": loads,
        "setup": "CPU, Dense 32-64-1, batch 64, SGD; pusher every 0.5 s to a loopback sink",
        "targets": TARGETS,
        "step_us_plain_loop": loop,
        "ddp_one_rank_gloo": distributed,
        # What a loaded machine changes least: each mode's p50 over the empty method's.
        "p50_over_empty_method_floor": {
            mode: round(costs["p50"] / floor, 1) if floor else None for mode, costs in modes.items()
        },
        "met": {f"{mode}_p50": costs["p50"] <= target for mode, costs in modes.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'measure':<44}{'p50 us':>10}{'p99 us':>10}{'target':>10}")
    for label, costs in (
        ("monitor.step, plain loop, loss tensor", loop["loss_tensor"]),
        ("monitor.step, plain loop, no loss", loop["no_loss"]),
        ("monitor.step, DDP (attached), loss tensor", distributed["step_us"]),
        ("an empty step method (floor)", loop["empty_method_floor"]),
    ):
        print(f"{label:<44}{costs['p50']:>10}{costs['p99']:>10}{'<= 20':>10}")
    spread = loop["loop_with_vs_without_monitor"]
    print(
        f"plain loop time with/without monitor: median {spread['ratio_median']} "
        f"({spread['ratio_min']}..{spread['ratio_max']})"
    )
    spread = distributed["loop_with_vs_without_monitor"]
    print(
        f"DDP loop time with/without monitor: median {spread['ratio_median']} "
        f"({spread['ratio_min']}..{spread['ratio_max']})"
    )
    print(f"load average (1, 5, 15 min): before {loads['before']}, after {loads['after']}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
