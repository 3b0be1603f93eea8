"""Exporter killed: MirrorwatchExporterDown arrives and silences the host's GPU alerts; the
exporter back: MirrorwatchExporterDown is resolved."""

from __future__ import annotations

import time
from pathlib import Path

from tests.e2e.drill import FastRules, Latency, measure, running_drill

DEADLINE_SECONDS = 60


def test_exporter_down_alerts_inhibits_gpu_alerts_and_resolves(
    fast_rules: FastRules, tmp_path: Path, latencies: list[Latency]
) -> None:
    with running_drill("imbalance", fast_rules, tmp_path) as drill:
        instance = str(drill.exporter_address)
        # No training run: the host-scoped imbalance fires within seconds. Its 1-minute
        # averages keep it firing for about a minute after the exporter dies, long enough to
        # see Alertmanager hold it back.
        drill.wait_alert("GpuUtilizationImbalance", DEADLINE_SECONDS, scope="host")

        killed_at = time.time()
        drill.exporter.kill()
        down, down_alert = drill.wait_alert(
            "MirrorwatchExporterDown", DEADLINE_SECONDS, instance=instance
        )
        latencies.append(
            measure(fast_rules, "exporter-down", "exporter killed", killed_at, down, down_alert)
        )

        gpu_alerts = drill.alertmanager_alerts(alertname="GpuUtilizationImbalance")
        assert gpu_alerts, "the GPU alert should still be active in Alertmanager"
        down_fingerprints = {
            a["fingerprint"] for a in drill.alertmanager_alerts(alertname="MirrorwatchExporterDown")
        }
        for gpu_alert in gpu_alerts:
            assert gpu_alert["status"]["state"] == "suppressed", gpu_alert
            assert set(gpu_alert["status"]["inhibitedBy"]) <= down_fingerprints, gpu_alert
            assert gpu_alert["status"]["inhibitedBy"], gpu_alert

        drill.exporter.start()
        drill.exporter.wait_ready(f"{drill.exporter_url}/readyz")
        back_at = time.time()
        resolved, resolved_alert = drill.wait_alert(
            "MirrorwatchExporterDown", DEADLINE_SECONDS, status="resolved", instance=instance
        )
        latencies.append(
            measure(
                fast_rules,
                "exporter-restart",
                "exporter serving again",
                back_at,
                resolved,
                resolved_alert,
            )
        )
        # While it was down, no GPU alert of that host went out.
        after_down = [
            a.name
            for n in drill.receiver.notifications()
            if down.received_at <= n.received_at < resolved.received_at
            for a in n.alerts
            if a.name.startswith("Gpu")
        ]
        assert after_down == []
