"""What a report covers: the range, the host(s), the run and its GPUs, found in Prometheus."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from mirrorwatch.alerts.promql import Select
from mirrorwatch.contract.labels import GPU_KEY, TARGET_LABELS, UUID_KEY, key_labels
from mirrorwatch.contract.metrics import (
    GPU_INFO,
    TRAINING_LAST_PUSH_TIMESTAMP_SECONDS,
    TRAINING_REPLICA_INFO,
    TRAINING_STEPS_TOTAL,
    UP,
)
from mirrorwatch.report.prometheus import Prometheus, Series

# About this many sampling points over a range: enough for a chart's width, few enough to ask
# a day-long run in one query.
POINTS = 500


# A GPU and its target by the contract's label keys (GPU_KEY, TARGET_KEY): the one key of the
# report's joins and dictionaries. Behind per-host agents hosts may share `instance`
# (docs/fleet.md), and only `host` tells their GPU 0s apart.
GPU_LABELS = key_labels("gpu", "uuid")
Key = tuple[str, ...]


def gpu_key(labels: Mapping[str, str]) -> Key:
    """The GPU_KEY values of a series' labels, "" where one is absent (as PromQL matches it)."""
    return tuple(labels.get(name, "") for name in GPU_LABELS)


def target_key(labels: Mapping[str, str]) -> Key:
    """The TARGET_KEY values of a series' labels, "" where one is absent."""
    return tuple(labels.get(name, "") for name in TARGET_LABELS)


def labels_of(key: Key, names: tuple[str, ...] = TARGET_LABELS) -> dict[str, str]:
    """The labels a key's values stand for (TARGET_KEY's unless ``names``), the absent left out."""
    return {name: value for name, value in zip(names, key, strict=True) if value}


class ScopeError(ValueError):
    """The run or range has nothing to report on; the message says what was looked for."""


@dataclass(frozen=True)
class Gpu:
    """A GPU of the scope, by its GPU_KEY labels (``cluster`` and ``host`` only behind agents),
    and its board's name."""

    instance: str
    gpu: str
    uuid: str
    name: str
    cluster: str = ""
    host: str = ""
    job: str = ""

    @property
    def labels(self) -> dict[str, str]:
        """The GPU_KEY labels its series carry: the ones that pick them in an answer."""
        return {name: getattr(self, name) for name in GPU_LABELS if getattr(self, name)}

    @property
    def key(self) -> Key:
        return gpu_key(self.labels)

    @property
    def target(self) -> Key:
        return target_key(self.labels)


@dataclass(frozen=True)
class Scope:
    """A range [start, end] sampled every ``step`` seconds at ``steps`` points, its GPUs, and
    the selectors that pick their series (``gpus_select``), their host's (``host``) and the
    run's (``run_select``)."""

    start: float
    end: float
    step: int
    run: str | None
    instances: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    # The agents' `host` label of the one host reported on, where hosts share an instance.
    host_label: str | None = None
    # The run named the GPUs it trains on (replica_info); False: it reported none (CPU
    # replicas, or replicas not mapped to GPUs) and ``gpus`` are every GPU of its instances.
    gpus_reported: bool = True

    @property
    def seconds(self) -> int:
        return round(self.end - self.start)

    @property
    def steps(self) -> int:
        return self.seconds // self.step

    @property
    def window(self) -> str:
        return f"{self.seconds}s"

    @property
    def resolution(self) -> str:
        return f"{self.step}s"

    @property
    def host(self) -> Select:
        chosen = (f'host="{self.host_label}"',) if self.host_label else ()
        return Select((_one_of("instance", self.instances), *chosen))

    @property
    def gpus_select(self) -> Select:
        return self.host.where(_one_of("uuid", tuple(sorted({g.uuid for g in self.gpus}))))

    @property
    def run_select(self) -> Select:
        return self.host.where(f'run="{self.run}"') if self.run else self.host

    @property
    def targets(self) -> tuple[Key, ...]:
        """The targets (TARGET_KEY values) of the scope's GPUs, in the GPUs' order."""
        return tuple(dict.fromkeys(g.target for g in self.gpus))


def _one_of(label: str, values: tuple[str, ...]) -> str:
    if len(values) == 1:
        return f'{label}="{values[0]}"'
    return f'{label}=~"{"|".join(_literal(v) for v in values)}"'


def _literal(value: str) -> str:
    """``value`` as a regex literal inside a PromQL string: metacharacters behind a backslash,
    itself doubled for the string (Python's re.escape also escapes "-", which PromQL refuses)."""
    return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\\\1", value)


def parse_time(text: str) -> float:
    """A time as Prometheus's API takes it: unix seconds or RFC 3339 (2024-05-01T12:00:00Z)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            "expected unix seconds or an RFC 3339 time such as 2024-05-01T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_time(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(series: list[Series]) -> tuple[float, float] | None:
    times = [t for s in series for t, _ in s.points]
    return (min(times), max(times)) if times else None


def _sized(start: float, end: float) -> tuple[float, int]:
    """The range ending at ``end``, shortened to a whole number of steps; and the step."""
    seconds = int(end - start)
    step = max(1, math.ceil(seconds / POINTS))
    return end - (seconds // step) * step, step


def _first_after(series: list[Series], moment: float, last: float) -> float:
    """The first sample time at or after ``moment`` of all ``series``: the scrape that first
    carried the totals of the push at ``moment`` (the run's last: a range ending at the push
    itself would end on the scrape before it, a push of steps short)."""
    return min((t for s in series for t, _ in s.points if t >= moment), default=last)


def find_scope(
    prometheus: Prometheus,
    run: str | None,
    instance: str | None,
    start: float,
    end: float,
    host: str | None = None,
) -> Scope:
    """The part of [start, end] that the run (or the instance, of ``host`` where hosts behind
    agents share it) has samples in, with its GPUs."""
    lookback = f"{max(1, int(end - start))}s"
    between = f"between {format_time(start)} and {format_time(end)}"
    if run is not None:
        steps = prometheus.instant(f'{TRAINING_STEPS_TOTAL}{{run="{run}"}}[{lookback}]', end)
        span = _span(steps)
        if span is None:
            raise ScopeError(
                f"unknown run {run!r}: Prometheus has no training series of it {between}"
            )
        replicas = prometheus.instant(
            f"max by ({UUID_KEY}) (max_over_time("
            f'{TRAINING_REPLICA_INFO}{{run="{run}"}}[{lookback}]))',
            end,
        )
        instances = tuple(sorted({s.label("instance") for s in steps}))
        uuids = {s.label("uuid") for s in replicas}
        # The exporter serves a run's last totals until its TTL passes: the run ended at its
        # last push, not at its last sample.
        pushed = prometheus.instant(
            "max (max_over_time("
            f'{TRAINING_LAST_PUSH_TIMESTAMP_SECONDS}{{run="{run}"}}[{lookback}]))',
            end,
        )
        if pushed and span[0] < pushed[0].value < span[1]:
            # A run of a few seconds still gets its two seconds: the exporter serves its
            # final totals unchanged after the push.
            end_of_run = max(_first_after(steps, pushed[0].value, span[1]), span[0] + 2)
            span = (span[0], min(span[1], end_of_run))
    else:
        assert instance is not None
        target = Select((f'instance="{instance}"', *((f'host="{host}"',) if host else ())))
        up = prometheus.instant(f"{target(UP)}[{lookback}]", end)
        span = _span(up)
        if span is None:
            who = f"instance {instance}" + (f" of host {host}" if host else "")
            raise ScopeError(f"empty range: no samples of {who} {between}")
        # Behind per-host agents every exporter may be localhost:9848 (docs/fleet.md): one
        # report never mixes hosts, so a shared instance needs its host named.
        hosts = sorted({s.label("host") for s in up})
        if len(hosts) > 1:
            raise ScopeError(
                f"instance {instance} is shared by hosts {', '.join(hosts)} (behind agents): "
                "add --host NAME"
            )
        instances, uuids = (instance,), set()
    first, last = span
    if last - first < 2:
        what = f"run {run!r}" if run else f"instance {instance}"
        raise ScopeError(f"empty range: {what} has under 2 seconds of samples {between}")
    chosen = (f'host="{host}"',) if host and run is None else ()
    info = prometheus.instant(
        f"max by ({GPU_KEY}, name) (max_over_time("
        f"{Select((_one_of('instance', instances), *chosen))(GPU_INFO)}"
        f"[{lookback}]))",
        end,
    )
    gpus = tuple(
        sorted(
            (
                Gpu(
                    s.label("instance"),
                    s.label("gpu"),
                    s.label("uuid"),
                    s.label("name"),
                    s.label("cluster"),
                    s.label("host"),
                    s.label("job"),
                )
                for s in info
                if not uuids or s.label("uuid") in uuids
            ),
            key=lambda g: (g.instance, g.target, int(g.gpu) if g.gpu.isdigit() else 0),
        )
    )
    if not gpus:
        raise ScopeError(f"no GPU series of {', '.join(instances)} {between}")
    begin, step = _sized(first, last)
    reported = run is None or bool(uuids)
    return Scope(begin, last, step, run, instances, gpus, host if run is None else None, reported)
