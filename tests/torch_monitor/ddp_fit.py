"""A DistributedDataParallel job on CPU: ranks spawned by torch.multiprocessing, gloo, each
rank's MirrorwatchMonitor pushing to one exporter, as torchrun's processes would.

    python -m tests.torch_monitor.ddp_fit --url URL --bus-ids A,B --steps 40 --out DIR

Rank r trains on BATCH + r examples a step (so each worker's examples are its own) and stands
on the r-th bus id: every rank gets the whole list in ``MIRRORWATCH_REPLICA_PCI_BUS_IDS`` and
its ``LOCAL_RANK``, as under torchrun. ``--starve-rank``
makes that rank wait ``--starve-seconds`` for its data before every step, as a rank with a slow
input pipeline does; ``--slow-rank`` makes that rank take ``--slow-seconds`` longer to compute
every step (between its forward and backward passes), as a rank on a slower GPU does: either way
the other ranks wait for it in their all-reduces. Each rank writes
``DIR/rank-<r>.json``: the run id its monitor used, its steps and examples.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from tests.ports import free_port

BATCH = 8


def rank_main(rank: int, options: argparse.Namespace, port: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from mirrorwatch.torch import MirrorwatchMonitor

    torch.set_num_threads(1)  # two ranks on a shared 2-core machine
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # As torchrun starts its ranks: every rank the same list, one id per local rank.
    os.environ.update(LOCAL_RANK=str(rank), MIRRORWATCH_REPLICA_PCI_BUS_IDS=options.bus_ids)
    dist.init_process_group("gloo", rank=rank, world_size=options.ranks)
    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = BATCH + rank
    steps = 0
    with MirrorwatchMonitor(
        url=options.url, run=options.run or None, interval=options.interval
    ) as monitor:
        monitor.attach(model)
        while options.steps == 0 or steps < options.steps:
            if rank == options.starve_rank:
                time.sleep(options.starve_seconds)
            x, y = torch.randn(batch, 32), torch.randn(batch, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            if rank == options.slow_rank:
                time.sleep(options.slow_seconds)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            monitor.step(batch, loss)
            steps += 1
        run = monitor.run
    result = {"rank": rank, "run": run, "steps": steps, "examples": steps * batch}
    Path(options.out, f"rank-{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--bus-ids", required=True, help="one per rank, comma-separated")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=0, help="0: until stopped")
    parser.add_argument("--run", default="", help="default: rank 0's fresh id, shared")
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--starve-rank", type=int, default=-1)
    parser.add_argument("--starve-seconds", type=float, default=0.05)
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-seconds", type=float, default=0.02)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    os.environ.pop("MIRRORWATCH_RUN", None)
    from torch.multiprocessing.spawn import start_processes

    # fork: the ranks inherit this process's torch instead of each importing it again (seconds
    # on a busy machine); nothing here has started CUDA or a gloo thread yet.
    start_processes(
        rank_main, args=(options, free_port()), nprocs=options.ranks, start_method="fork"
    )


if __name__ == "__main__":
    main()
