"""What silences what in Alertmanager: the inhibit rules every Alertmanager configuration carries.

mirrorwatch.alerts.alertmanager writes them into alerts/alertmanager.yml, its Slack/e-mail example
and the compose stack's prometheus/alertmanager.yml. The `equal` lists are the label keys of
mirrorwatch.contract.labels, so an inhibition keeps hosts behind agents apart exactly as the rules
do; where a rule is about causes, its alerts and their order come from mirrorwatch.contract.causes.

An inhibition hides a notification, so each one here silences only what says nothing its source
has not said: the same host or GPU seen through a broken pipe, or the early warning of what is
already firing. docs/runbook.md ("Routing alerts") gives the reasoning, and what was left out.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirrorwatch.contract.causes import cause
from mirrorwatch.contract.labels import key_labels


@dataclass(frozen=True)
class Inhibition:
    """One inhibit rule: while an alert matching ``source`` fires, Alertmanager holds back the
    alerts matching ``target`` whose labels in ``equal`` are the source's (a label absent from
    both counts as equal). ``why`` is the comment above it in the generated files."""

    why: str
    source: tuple[str, ...]
    target: tuple[str, ...]
    equal: tuple[str, ...]

    def rule(self) -> dict[str, object]:
        """The rule as Alertmanager's `inhibit_rules` reads it."""
        return {"source_matchers": self.source, "target_matchers": self.target, "equal": self.equal}


def alertname(*names: str) -> str:
    """A matcher for alerts of any of ``names``."""
    if len(names) == 1:
        return f'alertname="{names[0]}"'
    return f'alertname=~"{"|".join(names)}"'


def outranks(higher: str, lower: str) -> Inhibition:
    """The alert of cause ``higher`` silences the one of cause ``lower`` on the same GPU: only
    for a lower-ranked cause whose alert warns of what the higher one's says is happening."""
    source, target = cause(higher), cause(lower)
    if source.rank >= target.rank:
        raise ValueError(f"{higher} (rank {source.rank}) does not outrank {lower}")
    return Inhibition(
        f"{source.alert} already says what {target.alert} warns of on that GPU.",
        (alertname(source.alert),),
        (alertname(target.alert),),
        key_labels("gpu", "uuid"),
    )


GPU_ALERTS = 'alertname=~"Gpu.+"'
LOST = "GpuLost"

INHIBITIONS: tuple[Inhibition, ...] = (
    Inhibition(
        "A host whose exporter is down or whose NVML is broken: its GPU alerts say nothing new.",
        (alertname(cause("telemetry_gap").alert, "MirrorwatchNvmlUnavailable"),),
        (GPU_ALERTS,),
        key_labels(),
    ),
    Inhibition(
        "A lost GPU explains everything else that GPU reports.",
        (alertname(LOST),),
        (GPU_ALERTS, f'alertname!="{LOST}"'),
        key_labels("gpu", "uuid"),
    ),
    # Heat: GpuTemperatureNearSlowdown is the early warning of GpuThermalThrottling (same
    # causes, same fix); once the GPU throttles, the warning is said, and it speaks again if
    # the GPU stays hot after the throttling ends.
    outranks("thermal_throttling", "temperature_headroom"),
    Inhibition(
        "A run hung in a collective has stalled: TrainingHungInCollective says so, and which\n"
        "GPU the others wait for.",
        (alertname("TrainingHungInCollective"),),
        (alertname("TrainingStalled"),),
        ("run",),
    ),
    Inhibition(
        "The critical form of an alert silences its warning form for the same GPU, run or host\n"
        "(a critical XID and a warning XID on one GPU).",
        ('severity="critical"',),
        ('severity="warning"',),
        ("alertname", *key_labels("gpu", "uuid", "run")),
    ),
)


def rules() -> list[dict[str, object]]:
    """Every inhibit rule, in order."""
    return [inhibition.rule() for inhibition in INHIBITIONS]
