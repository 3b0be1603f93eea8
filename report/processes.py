"""Findings about who else is on the run's GPUs: processes that are not the run's workers."""

from __future__ import annotations

from mirrorwatch.alerts.promql import Select
from mirrorwatch.contract.causes import cause
from mirrorwatch.contract.labels import GPU_KEY
from mirrorwatch.contract.metrics import (
    GPU_FOREIGN_PROCESSES,
    GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES,
)
from mirrorwatch.report import queries as q
from mirrorwatch.report.evidence import Ask, Finding, share_of
from mirrorwatch.report.words import percent, plural

GIB = 1024.0**3


def foreign_select(ask: Ask) -> Select:
    """The selected GPUs' foreign-process series, of the report's run when it has one."""
    s = ask.scope
    return s.gpus_select.where(f'run="{s.run}"') if s.run else s.gpus_select


def foreign_processes(ask: Ask) -> list[Finding]:
    """A GPU of the run shared with processes that are not the run's, for part of the range.

    The exporter publishes these only for runs whose workers report their pid (docs/api.md):
    without them there is nothing to find, and nothing is said.
    """
    s, sel = ask.scope, foreign_select(ask)
    count = f"max by ({GPU_KEY}) ({sel(GPU_FOREIGN_PROCESSES)})"
    memory = f"max by ({GPU_KEY}) ({sel(GPU_FOREIGN_PROCESSES_MEMORY_USED_BYTES)})"
    share_query = q.held_share(f"{count} > 0", s.window, s.resolution, s.steps)
    most = q.range_max(count, s.window, s.resolution)
    most_memory = q.range_max(memory, s.window, s.resolution)
    shares = ask.by_gpu(share_query)
    findings = []
    for gpu in s.gpus:
        share = share_of(shares.get(gpu.key))
        if share <= 0:
            continue
        labels = gpu.labels
        wanted = [
            ("share of the range", "ratio", share_query),
            ("most foreign processes at once", "processes", most),
            ("most memory they held", "bytes", most_memory),
        ]
        figures = [
            f for f in (ask.figure(n, u, query, labels) for n, u, query in wanted) if f is not None
        ]
        values = {f.name: f.value for f in figures}
        processes = values.get("most foreign processes at once", 1.0)
        held = values.get("most memory they held")
        findings.append(
            Finding(
                "foreign_process",
                gpu.gpu,
                gpu.instance,
                share,
                f"GPU {gpu.gpu} was shared with {plural(round(processes), 'process', 'processes')} "
                f"that are not the run's for {percent(share)} of the range"
                + (f", holding up to {held / GIB:.1f} GiB of its memory." if held else ".")
                + " Every synchronous step waits for the replica on it.",
                figures,
                cause("foreign_process").runbook,
                ("foreign", "utilization"),
                labels=gpu.labels,
            )
        )
    return findings
