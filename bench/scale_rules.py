"""Every rule group's evaluation times over the scale bench's window, from both evaluators.

vmalert publishes a summary per group (`vmalert_iteration_duration_seconds` _sum and _count);
Prometheus the last evaluation's duration and time per group
(`prometheus_rule_group_last_duration_seconds`, `..._last_evaluation_timestamp_seconds`). Polling
both every POLL_SECONDS, well inside the 15 s interval, sees each evaluation once: the deltas of
vmalert's sum and count, and each new Prometheus timestamp with its duration. From those, each
group's mean and max over the window, and the evaluations each evaluator missed.
"""

from __future__ import annotations

import statistics
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

POLL_SECONDS = 2.0


def samples(url: str, names: set[str], label: str) -> dict[str, dict[str, float]]:
    """sample name -> label value -> value, for the samples of ``names`` at ``url``/metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    found: dict[str, dict[str, float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names and label in sample.labels:
                key = sample.labels[label]
                found[sample.name][key] = found[sample.name].get(key, 0.0) + sample.value
    return found


def prometheus_group(rule_group: str) -> str:
    """`file;name` as Prometheus labels a group -> the group's name."""
    return rule_group.rsplit(";", 1)[-1]


RuleKey = tuple[str, int, str]


def rule_evaluations(url: str) -> dict[RuleKey, tuple[str, float]]:
    """(group, place, rule name) -> (its last evaluation, seconds it took), /api/v1/rules."""
    body = httpx.get(f"{url}/api/v1/rules", timeout=30).json()
    found = {}
    for group in body["data"]["groups"]:
        for place, rule in enumerate(group["rules"]):
            seconds = rule.get("evaluationTime")
            if isinstance(seconds, int | float):
                at = str(rule.get("lastEvaluation", ""))
                found[(str(group["name"]), place, str(rule["name"]))] = (at, float(seconds))
    return found


class RuleTimes:
    """Each rule's evaluations seen by polling: new lastEvaluation, its evaluationTime."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._seen = {key: at for key, (at, _) in rule_evaluations(url).items()}
        self.seconds: dict[RuleKey, list[float]] = defaultdict(list)

    def poll(self) -> None:
        for key, (at, seconds) in rule_evaluations(self._url).items():
            if at != self._seen.get(key):
                self._seen[key] = at
                self.seconds[key].append(seconds)

    def summary(self) -> list[dict[str, Any]]:
        """Every rule evaluated in the window, the slowest (by mean) first."""
        rows = [
            {
                "group": group,
                "place": place,
                "rule": name,
                "evaluations": len(seconds),
                "mean_seconds": round(statistics.fmean(seconds), 4),
                "max_seconds": round(max(seconds), 4),
            }
            for (group, place, name), seconds in self.seconds.items()
            if seconds
        ]
        return sorted(rows, key=lambda r: -float(r["mean_seconds"]))


class GroupTimes:
    """Each evaluation's seconds per group and per rule, for vmalert and Prometheus (either may
    be absent: a run of one evaluator stack alone), from start() to stop()."""

    def __init__(self, vmalert_url: str | None, prometheus_url: str | None) -> None:
        self._vmalert = vmalert_url
        self._prometheus = prometheus_url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="group-times", daemon=True)
        self.vmalert: dict[str, list[float]] = defaultdict(list)
        self.prometheus: dict[str, list[float]] = defaultdict(list)
        self.rules: dict[str, RuleTimes] = {}
        self._missed_before: dict[str, dict[str, float]] = {}
        self._missed_after: dict[str, dict[str, float]] = {}

    def start(self) -> None:
        self._missed_before = self._missed()
        if self._vmalert:
            self.rules["vmalert"] = RuleTimes(self._vmalert)
        if self._prometheus:
            self.rules["prometheus"] = RuleTimes(self._prometheus)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._missed_after = self._missed()

    def _missed(self) -> dict[str, dict[str, float]]:
        missed = {}
        if self._vmalert:
            name = "vmalert_iteration_missed_total"
            missed["vmalert"] = samples(self._vmalert, {name}, "group").get(name, {})
        if self._prometheus:
            name = "prometheus_rule_group_iterations_missed_total"
            by_group = samples(self._prometheus, {name}, "rule_group").get(name, {})
            missed["prometheus"] = {prometheus_group(k): v for k, v in by_group.items()}
        return missed

    def _poll(self) -> None:
        sums = "vmalert_iteration_duration_seconds_sum"
        counts = "vmalert_iteration_duration_seconds_count"
        last = "prometheus_rule_group_last_duration_seconds"
        stamp = "prometheus_rule_group_last_evaluation_timestamp_seconds"
        before = samples(self._vmalert, {sums, counts}, "group") if self._vmalert else {}
        seen: dict[str, float] = {}
        if self._prometheus:
            first = samples(self._prometheus, {stamp}, "rule_group")
            seen = dict(first.get(stamp, {}))
        while not self._stop.wait(POLL_SECONDS):
            for rules in self.rules.values():
                rules.poll()
            if self._vmalert:
                now = samples(self._vmalert, {sums, counts}, "group")
                for group, count in now.get(counts, {}).items():
                    new = int(count - before.get(counts, {}).get(group, 0.0))
                    if new > 0:
                        spent = now[sums][group] - before.get(sums, {}).get(group, 0.0)
                        self.vmalert[group] += [spent / new] * new
                before = now
            if self._prometheus:
                prom = samples(self._prometheus, {last, stamp}, "rule_group")
                for key, at in prom.get(stamp, {}).items():
                    if at != seen.get(key):
                        seen[key] = at
                        self.prometheus[prometheus_group(key)].append(prom[last][key])

    def summary(self) -> dict[str, dict[str, dict[str, Any]]]:
        """evaluator -> group -> evaluations, mean_seconds, max_seconds, missed."""

        def described(
            times: Mapping[str, list[float]], evaluator: str
        ) -> dict[str, dict[str, Any]]:
            missed_before = self._missed_before.get(evaluator, {})
            missed_after = self._missed_after.get(evaluator, {})
            return {
                group: {
                    "evaluations": len(seconds),
                    "mean_seconds": round(statistics.fmean(seconds), 4),
                    "max_seconds": round(max(seconds), 4),
                    "missed_iterations": int(
                        missed_after.get(group, 0.0) - missed_before.get(group, 0.0)
                    ),
                }
                for group, seconds in sorted(times.items())
                if seconds
            }

        result = {}
        if self._vmalert:
            result["vmalert"] = described(self.vmalert, "vmalert")
        if self._prometheus:
            result["prometheus"] = described(self.prometheus, "prometheus")
        return result

    def rule_summary(self) -> dict[str, list[dict[str, Any]]]:
        """evaluator -> every rule's evaluations, mean and max seconds, the slowest first."""
        return {evaluator: rules.summary() for evaluator, rules in self.rules.items()}
