"""`thermal-throttle`: GpuThermalThrottling arrives for the hot GPU, and only for it."""

from __future__ import annotations

from pathlib import Path

from mirrorwatch.exporter.vocabulary import parse_prometheus_duration
from tests.e2e.drill import EVALUATION_INTERVAL, FastRules, Latency, measure, running_drill

# GPU 1 passes its slowdown temperature ~23 s after the exporter starts; its share of the
# minute reaches the fraction (5%: 3 s) shortly after, then `for:` (10 s) runs.
DEADLINE_SECONDS = 90


def test_thermal_throttling_alert_names_the_hot_gpu(
    fast_rules: FastRules, tmp_path: Path, latencies: list[Latency]
) -> None:
    with running_drill("thermal-throttle", fast_rules, tmp_path) as drill:
        gpus = drill.gpus()

        notification, alert = drill.wait_alert("GpuThermalThrottling", DEADLINE_SECONDS)

        assert alert.labels["gpu"] == "1"
        assert alert.labels["uuid"] == gpus[1]["uuid"]
        assert alert.labels["severity"] == "warning"
        throttled = {
            a.labels.get("gpu")
            for n in drill.receiver.notifications()
            for a in n.alerts
            if a.name == "GpuThermalThrottling"
        }
        assert throttled == {"1"}
        started = drill.first_sample_time(
            'mirrorwatch_gpu_clocks_event_active{gpu="1",'
            'reason=~"sw_thermal_slowdown|hw_thermal_slowdown"}'
        )
        latency = measure(
            fast_rules,
            "thermal-throttle",
            "thermal slowdown first scraped",
            started,
            notification,
            alert,
        )
        latencies.append(latency)
        # docs/alert-latency.md: the model's range, plus the time the per-minute share takes to
        # reach the fraction when fully throttled (the sustained-heat rule's own wait), and one
        # evaluation for the recorded share of each evaluation that the minute's share averages.
        fraction = fast_rules.thresholds.GpuThermalThrottling.minute_fraction
        evaluation = parse_prometheus_duration(EVALUATION_INTERVAL)
        latest = latency.model_test[1] + fraction * 60 + evaluation
        assert latency.seconds <= latest, (
            f"GpuThermalThrottling took {latency.seconds:.1f} s, over the {latest:.0f} s documented"
        )
