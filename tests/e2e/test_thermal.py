"""`thermal-throttle`: GpuThermalThrottling arrives for the hot GPU, and only for it."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.drill import FastRules, Latency, measure, running_drill

# GPU 1 passes its slowdown temperature ~23 s after the exporter starts; then `for:` (10 s).
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
        latencies.append(
            measure(
                fast_rules,
                "thermal-throttle",
                "thermal slowdown first scraped",
                started,
                notification,
                alert,
            )
        )
