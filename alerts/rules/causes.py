"""Cause rules: per GPU, which known causes hold now, with evidence, and the likely one by rank.

Two levels, as GpuUtilizationImbalance has two scopes. `instance_gpu:` covers every GPU for
the hardware causes (heat, power, hardware slowdown, a PCIe link below its maximum), and the
busy GPUs that belong to no active run for the rest (a slower interconnect than their busy
peers', waiting on input, none). `run_gpu:` covers each GPU of an active run: its hardware
causes, a process that is not the run's, a slower interconnect than its run peers', and,
when none of these holds, waiting on input (it lags the run's busiest GPU by more than the
imbalance threshold) or none. Each series carries `cause` (the report's finding kind) and
`evidence` (what its value is, with the unit); `:rank` gives its precedence (1 first) from
mirrorwatch.contract.causes, `:likely` the first of each GPU.

The rules run in order within their group, so a later one reads what an earlier one recorded
at the same evaluation (Prometheus commits each rule's samples before the next:
prometheus/prometheus rules/group.go, Group.Eval). The imbalance alert's text (why_run,
why_host) asks the rank series of its lagging GPU, most important first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, get_args

from mirrorwatch.alerts import gpu_queries, promql, recorded, throttling
from mirrorwatch.alerts.fragments import dedent, fill, num
from mirrorwatch.alerts.rules import Record
from mirrorwatch.alerts.templates import gpu_value, matchers, points_of, value_of
from mirrorwatch.alerts.thresholds import Thresholds
from mirrorwatch.contract.causes import LIVE, Cause, cause
from mirrorwatch.contract.labels import GPU_KEY, RUN_KEY, TARGET_KEY, UUID_KEY, key
from mirrorwatch.contract.metrics import (
    GPU_CLOCK_HERTZ,
    GPU_CLOCK_MAX_HERTZ,
    GPU_FOREIGN_PROCESSES,
    GPU_P2P_LINK_INFO,
    GPU_PCIE_LINK_GENERATION,
    GPU_PCIE_LINK_GENERATION_MAX,
    GPU_PCIE_LINK_WIDTH,
    GPU_PCIE_LINK_WIDTH_MAX,
    GPU_POWER_LIMIT_WATTS,
    GPU_POWER_WATTS,
    GPU_TEMPERATURE_CELSIUS,
    GPU_TEMPERATURE_THRESHOLD_CELSIUS,
    TRAINING_STEP_DURATION_SECONDS,
)
from mirrorwatch.exporter.backend import P2pLink

GPU_CAUSE = "instance_gpu:mirrorwatch_gpu_cause:evidence"
GPU_CAUSE_RANK = "instance_gpu:mirrorwatch_gpu_cause:rank"
GPU_LIKELY_CAUSE = "instance_gpu:mirrorwatch_gpu_cause:likely"
RUN_GPU_CAUSE = "run_gpu:mirrorwatch_gpu_cause:evidence"
RUN_GPU_CAUSE_RANK = "run_gpu:mirrorwatch_gpu_cause:rank"
RUN_GPU_LIKELY_CAUSE = "run_gpu:mirrorwatch_gpu_cause:likely"

# The causes of the GPU itself, whoever uses it; the run level takes them from the GPU level.
HARDWARE = tuple(
    cause(kind)
    for kind in ("hardware_slowdown", "thermal_throttling", "power_capping", "pcie_degraded")
)
# A process that is not a run's is known only for the GPUs of a run.
HOST_LIVE = tuple(c for c in LIVE if c.kind != "foreign_process")
RUN_GPU_KEY = key("run", "gpu", "uuid")
# What the alert looks its run GPU up by.
RUN_UUID_KEY = key("run", "uuid")
SM_CLOCK = 'clock="sm"'
# How a GPU reaches a peer other than over NVLink, every way the exporter names (its `link`
# label), as one positive matcher: `link!="nvlink"` would make the store read every pair's
# series to find the few that differ (VictoriaMetrics' index answers a negative filter by
# the metric's whole series set: 258,048 at 64 hosts of 64 GPUs, docs/scale.md).
NOT_NVLINK = f'link=~"{"|".join(link for link in get_args(P2pLink) if link != "nvlink")}"'


def _labels(c: Cause) -> dict[str, str]:
    return {"cause": c.kind, "evidence": c.evidence}


def _per_gpu(metric: str, *matchers: str) -> str:
    return f"max by ({GPU_KEY}) ({promql.RULES(metric, *matchers)})"


def _share(metric: str, limit: str, *matchers: str) -> str:
    return f"{_per_gpu(metric, *matchers)}\n/ on ({GPU_KEY})\n{_per_gpu(limit, *matchers)}"


def _throttled(c: Cause) -> str:
    """Each GPU held back for this cause at this evaluation: the report's "throttled now"."""
    return throttling.held(c, promql.RULES)


def hardware_rules(t: Thresholds) -> list[Record]:
    sm_clock = _share(GPU_CLOCK_HERTZ, GPU_CLOCK_MAX_HERTZ, SM_CLOCK)
    pcie = (
        f"{_per_gpu(GPU_PCIE_LINK_WIDTH)}\n"
        f"* on ({GPU_KEY}) {_per_gpu(GPU_PCIE_LINK_GENERATION)}\n"
        f"/ on ({GPU_KEY})\n"
        f"(\n  {_per_gpu(GPU_PCIE_LINK_WIDTH_MAX)}\n"
        f"  * on ({GPU_KEY}) {_per_gpu(GPU_PCIE_LINK_GENERATION_MAX)}\n)"
    )
    evidence = {
        "hardware_slowdown": sm_clock,
        "thermal_throttling": _per_gpu(GPU_TEMPERATURE_CELSIUS),
        "power_capping": _share(GPU_POWER_WATTS, GPU_POWER_LIMIT_WATTS),
        "pcie_degraded": pcie,
    }
    conditions = {c.kind: _throttled(c) for c in HARDWARE if c.clock_reasons} | {
        "pcie_degraded": fill(
            "max by («key») (\n  «degraded»\n)",
            {
                "key": GPU_KEY,
                "degraded": gpu_queries.pcie_link_degraded(promql.RULES, t.busy_utilization_ratio),
            },
        )
    }
    return [
        Record(
            GPU_CAUSE,
            "(\n  «evidence»\n)\nand on («key»)\n(\n  «condition»\n)",
            {"evidence": evidence[c.kind], "condition": conditions[c.kind], "key": GPU_KEY},
            _labels(c),
        )
        for c in HARDWARE
    ]


def clock_rules(t: Thresholds) -> list[Record]:
    """The hardware causes that hold the clocks back (heat, power, hardware slowdown)."""
    return [r for r in hardware_rules(t) if r.labels["cause"] != "pcie_degraded"]


def pcie_rules(t: Thresholds) -> list[Record]:
    """The PCIe link below its maximum while busy: eight link series and the utilisation."""
    return [r for r in hardware_rules(t) if r.labels["cause"] == "pcie_degraded"]


def interconnect(members: str, key: str) -> str:
    """The GPUs of ``members`` (a group of GPUs, by ``key``) whose link to the group's other
    GPUs is worse than their peers': across CPU sockets, or without NVLink where another GPU
    of the group has it. The value is how many of the group's GPUs it reaches without NVLink.

    A GPU's peers are the group's GPUs on its host, by NVML index (peer_gpu). Only the pairs
    not joined by NVLink are read (`p2p_link_info` has a series per pair, n·(n-1) on a host of
    n GPUs: 258,048 at 64 hosts of 64, docs/scale.md): that a GPU reaches none of its peers
    over NVLink is that all of them are among those pairs, since the exporter lists every
    peer of the host, and another GPU of the group has NVLink where not all of its are."""
    links = dedent(
        """
        mirrorwatch_gpu_p2p_link_info{«link»}
        and on («target», uuid) «members»
        and on («target», peer_gpu) max by («target», peer_gpu) (
          label_replace(«members», "peer_gpu", "$1", "gpu", "(.*)")
        )
        """
    ).rstrip()

    def count(by: str, link: str) -> str:
        parts = {"target": TARGET_KEY, "members": members, "link": link}
        return fill(f"count by ({by}) (\n  «links»\n)", {**parts, "links": links})

    slow = count(GPU_KEY, NOT_NVLINK)
    peers = fill(
        "(count by («target») (max by («target», gpu) («members»)) - 1)",
        {"target": TARGET_KEY, "members": members},
    )
    # Every peer of the group reached without NVLink.
    no_nvlink = fill(
        "(\n  «slow»\n  == on («target») group_left ()\n  «peers»\n)",
        {"slow": slow, "target": TARGET_KEY, "peers": peers},
    )
    some_nvlink = fill(
        "count by («key») (\n  max by («gpu») («members»)\n  unless on («gpu») «no_nvlink»\n)",
        {"key": key, "gpu": GPU_KEY, "members": members, "no_nvlink": no_nvlink},
    )
    return fill(
        dedent(
            """
            (
              «slow»
              and on («gpu»)
              «cross»
            )
            or
            (
              «no_nvlink»
              and on («key»)
              («peers» > 0)
              and on («key»)
              «some_nvlink»
            )
            """
        ),
        {
            "slow": slow,
            "cross": count(GPU_KEY, 'link="cross_numa"'),
            "no_nvlink": no_nvlink,
            "peers": peers,
            "some_nvlink": some_nvlink,
            "gpu": GPU_KEY,
            "key": key,
        },
    )


def _before(level: str, kind: str = "imbalance") -> str:
    """The causes of ``level`` recorded before ``kind`` in this evaluation. Never ``kind`` itself
    or what follows it: their series of the evaluation before are still within the lookback
    window, and a rule would be ``unless`` its own last sample, every other minute."""
    later = [c.kind for c in LIVE[[c.kind for c in LIVE].index(kind) :]]
    return f'{level}{{cause!~"{"|".join(later)}"}}'


def _rank(level: str, causes: tuple[Cause, ...]) -> str:
    """Each cause series of ``level`` valued by its precedence (NaN evidence counts too)."""
    return "\nor\n".join(
        f'count without () ({level}{{cause="{c.kind}"}}) * {c.rank}' for c in causes
    )


def _first(rank: str, key: str) -> str:
    """Each GPU's cause of the lowest rank, from the ranks' expression rather than their
    recorded series: vmalert sees a rule's results only once they are written back to the
    store, so every recorded step in a chain costs an evaluation or more there."""
    return fill(
        "(\n  «rank»\n)\n== on («key») group_left ()\nmin by («key») (\n  «rank»\n)",
        {"rank": rank, "key": key},
    )


def attach_run(expr: str) -> str:
    """``expr`` (one series per GPU) on every GPU of an active run, with the run's labels."""
    return fill(
        "(\n  «expr»\n)\n* on («target», uuid) group_right ()\ncount without () («run_gpus»)",
        {"expr": expr, "target": TARGET_KEY, "run_gpus": recorded.RUN_GPU_UTIL},
    )


def host_rules(t: Thresholds) -> list[Record]:
    """The busy GPUs of a host in no active run (the host-scope imbalance's GPUs), as the
    recording group recorded them."""
    members = f"({recorded.BUSY_UNASSIGNED})"
    lag = f"max by ({TARGET_KEY}) {members}\n- on ({TARGET_KEY}) group_right ()\n{members}"
    known = _before(GPU_CAUSE)
    return [
        Record(
            GPU_CAUSE,
            "(\n  «lag»\n) > «spread»\nunless on («key») «known»",
            {
                "lag": lag,
                "spread": t.GpuUtilizationImbalance.spread_ratio,
                "key": GPU_KEY,
                "known": known,
            },
            _labels(cause("imbalance")),
        ),
        Record(
            GPU_CAUSE,
            "(\n  «lag»\n)\nunless on («key») «known»",
            {"lag": lag, "key": GPU_KEY, "known": _before(GPU_CAUSE, "none")},
            _labels(cause("none")),
        ),
    ]


def run_rules(t: Thresholds) -> list[Record]:
    lag = (
        f"max by (run) ({recorded.RUN_GPU_BALANCE})\n- on (run) group_right ()\n"
        f"max by ({RUN_GPU_KEY}) ({recorded.RUN_GPU_BALANCE})"
    )
    known = f"on ({RUN_GPU_KEY}) {_before(RUN_GPU_CAUSE)}"
    return [
        # One rule per cause: a GPU with two of them would be two series on the "one" side.
        *(
            Record(RUN_GPU_CAUSE, attach_run(f'{GPU_CAUSE}{{cause="{c.kind}"}}'), labels=_labels(c))
            for c in HARDWARE
        ),
        Record(
            RUN_GPU_CAUSE,
            f"max by ({RUN_GPU_KEY}) ({promql.RULES(GPU_FOREIGN_PROCESSES)}) > 0",
            labels=_labels(cause("foreign_process")),
        ),
        Record(
            RUN_GPU_CAUSE,
            f"(\n  {lag}\n) > {num(t.GpuUtilizationImbalance.spread_ratio)}\nunless {known}",
            labels=_labels(cause("imbalance")),
        ),
        Record(
            RUN_GPU_CAUSE,
            f"(\n  {lag}\n)\nunless on ({RUN_GPU_KEY}) {_before(RUN_GPU_CAUSE, 'none')}",
            labels=_labels(cause("none")),
        ),
    ]


def rank_rules(t: Thresholds) -> list[Record]:
    """Each cause series valued by its precedence, and each GPU's first, at both levels."""
    return [
        Record(GPU_CAUSE_RANK, _rank(GPU_CAUSE, HOST_LIVE)),
        Record(GPU_LIKELY_CAUSE, _first(_rank(GPU_CAUSE, HOST_LIVE), GPU_KEY)),
        Record(RUN_GPU_CAUSE_RANK, _rank(RUN_GPU_CAUSE, LIVE)),
        Record(RUN_GPU_LIKELY_CAUSE, _first(_rank(RUN_GPU_CAUSE, LIVE), RUN_GPU_KEY)),
    ]


def interconnect_rules(t: Thresholds) -> list[Record]:
    """A slower link to the group's peers, for the host's unassigned busy GPUs and for each
    run's GPUs: the only rules that read the GPU pairs (`p2p_link_info`), a group of their own
    (alerts/build.py) read by the imbalance and none rules of both levels."""
    return [
        Record(
            GPU_CAUSE,
            interconnect(f"({recorded.BUSY_UNASSIGNED})", TARGET_KEY),
            labels=_labels(cause("interconnect")),
        ),
        Record(
            RUN_GPU_CAUSE,
            attach_run(interconnect(recorded.RUN_GPU_UTIL, TARGET_KEY)),
            labels=_labels(cause("interconnect")),
        ),
    ]


def rules(t: Thresholds) -> list[Record]:
    return [
        *hardware_rules(t),
        *interconnect_rules(t),
        *host_rules(t),
        *run_rules(t),
        *rank_rules(t),
    ]


# --- the imbalance alert's "why" ---------------------------------------------------------------

_THIS_GPU = "GPU {{ $labels.gpu }}"
_SM = fill(
    "SM clock «sm»Hz of «sm_max»Hz",
    {
        "sm": gpu_value(GPU_CLOCK_HERTZ, "humanize", SM_CLOCK),
        "sm_max": gpu_value(GPU_CLOCK_MAX_HERTZ, "humanize", SM_CLOCK),
    },
)


def _pcie(quantity: Literal["width", "generation"], limit: Literal["now", "max"]) -> str:
    now, top = gpu_queries.PCIE_LINK[quantity]
    return gpu_value(top if limit == "max" else now)


def _evidence_of(level: str, kind: str, key: str, pipe: str) -> str:
    return value_of(level, key, f'cause="{kind}"', pipe)


def _phrases(level: str, key: str, group: str) -> dict[str, str]:
    """What the alert says for each live cause of the lagging GPU, with its evidence."""
    wanted, args = matchers(UUID_KEY)
    cross_numa = (
        f'{{{{ with printf `{GPU_P2P_LINK_INFO}{{{wanted},link="cross_numa"}}` '
        f"{args} | query }}}}, across CPU sockets (cross-NUMA){{{{ end }}}}"
    )
    return {
        "hardware_slowdown": f"{_THIS_GPU} is {cause('hardware_slowdown').held_back}: the board "
        f"cut its clocks, {_SM}.",
        "thermal_throttling": f"{_THIS_GPU} is {cause('thermal_throttling').held_back}: "
        + gpu_value(GPU_TEMPERATURE_CELSIUS, "humanize")
        + " °C against its "
        + gpu_value(GPU_TEMPERATURE_THRESHOLD_CELSIUS, "humanize", 'threshold="slowdown"')
        + f" °C slowdown, {_SM}.",
        "power_capping": f"{_THIS_GPU} is {cause('power_capping').held_back}: "
        + gpu_value(GPU_POWER_WATTS, "humanize")
        + " W of its "
        + gpu_value(GPU_POWER_LIMIT_WATTS, "humanize")
        + f" W limit, {_SM}.",
        "pcie_degraded": f"{_THIS_GPU}'s PCIe link runs below its maximum while busy: gen "
        f"{_pcie('generation', 'now')} x{_pcie('width', 'now')} of gen "
        f"{_pcie('generation', 'max')} x{_pcie('width', 'max')}.",
        "foreign_process": f"{_THIS_GPU} is shared with "
        + _evidence_of(level, "foreign_process", key, "")
        + " process(es) that are not the run's.",
        "interconnect": f"{_THIS_GPU} reaches "
        + _evidence_of(level, "interconnect", key, "")
        + f" of {group}'s other GPUs without NVLink{cross_numa}: every all-reduce waits on "
        "its slowest link.",
        "imbalance": f"No hardware cause on {_THIS_GPU}: most likely its input pipeline (its "
        + _BALANCE_SOURCE
        + " is "
        + points_of(level, key, 'cause="imbalance"')
        + f" below {group}'s busiest GPU"
        + (_step_time() if key == RUN_UUID_KEY else "")
        + ").",
        "none": f"No known cause on {_THIS_GPU}.",
    }


_BALANCE_SOURCE = (
    '{{ if eq $labels.source "sm_activity" }}SM activity{{ else }}utilisation{{ end }}'
)


def _step_time() -> str:
    """The run's median step time over the last 5 minutes, where its histogram has steps."""
    wanted, args = matchers(RUN_KEY)
    return (
        "{{ with printf `histogram_quantile(0.5, sum by (le) (rate("
        f"{TRAINING_STEP_DURATION_SECONDS}_bucket{{{wanted}}}[5m]))) > 0` "
        f"{args} | query }}}}; the run's median step takes "
        "{{ . | first | value | humanizeDuration }}{{ end }}"
    )


def why(
    rank: str, level: str, kinds: Sequence[Cause], key: str, group: str, runbook_url: str
) -> str:
    """The causes that hold on the alert's GPU, most important first, the first with its
    runbook section; what the alert said before the rules knew, until they have run."""
    wanted, args = matchers(key)
    phrases = _phrases(level, key, group)
    branches = "".join(
        f'{{{{ {"if" if i == 0 else "else if"} eq $c.Labels.cause "{c.kind}" }}}}'
        f"{text}{{{{ if not $i }}}} See {runbook_url}#{c.anchor}.{{{{ end }}}}"
        for i, (c, text) in enumerate((c, phrases[c.kind]) for c in kinds)
    )
    return (
        f"{{{{ range $i, $c := printf `sort({rank}{{{wanted}}})` {args} | query }}}}"
        f"{{{{ if $i }}}} Also: {{{{ end }}}}{branches}{{{{ end }}}}"
        "{{ else }}That GPU waits on input, on a slower link or on a throttled GPU.{{ end }}"
    )


def why_run(runbook_url: str) -> str:
    return why(
        RUN_GPU_CAUSE_RANK,
        RUN_GPU_CAUSE,
        LIVE,
        RUN_UUID_KEY,
        "the run",
        runbook_url,
    )


def why_host(runbook_url: str) -> str:
    return why(
        GPU_CAUSE_RANK,
        GPU_CAUSE,
        HOST_LIVE,
        UUID_KEY,
        "the host",
        runbook_url,
    )
