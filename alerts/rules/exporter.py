"""Alerts on the pipeline itself: an exporter not scraped, NVML gone, and the Watchdog."""

from __future__ import annotations

from mirrorwatch.alerts.rules import Alert
from mirrorwatch.alerts.thresholds import Thresholds


def alerts(t: Thresholds) -> list[Alert]:
    return [
        # `absent` covers a Prometheus that scrapes no exporter at all (a wrong job name).
        Alert(
            "MirrorwatchExporterDown",
            "warning",
            'up{job=~"«job_regex»"} == 0 or absent(up{job=~"«job_regex»"})',
            "{{ if $labels.instance }}mirrorwatch exporter on «HOST» is down"
            "{{ else }}No mirrorwatch exporter is scraped{{ end }}",
            "{{ with $labels.instance }}Prometheus cannot scrape the mirrorwatch exporter at "
            "{{ . }}{{ with $labels.host }} on {{ . }}{{ end }} (job {{ $labels.job }}): GPU "
            "and training alerts for this host cannot fire.{{ else }}Prometheus has no scrape "
            'target with a job matching "«job_regex»": no GPU or training alert can fire.'
            "{{ end }}",
            "{{ if $labels.instance }}down{{ else }}absent{{ end }}",
        ),
        Alert(
            "MirrorwatchNvmlUnavailable",
            "critical",
            "mirrorwatch_up == 0",
            "NVML is unavailable on «HOST»",
            "The exporter on «HOST» serves, but NVML does not answer: no GPU "
            "values are collected. Its /readyz names the reason.",
            "down",
        ),
        Alert(
            "Watchdog",
            "info",
            "vector(1)",
            "The mirrorwatch alerting pipeline works",
            "Always firing, on purpose: it proves that Prometheus evaluates the mirrorwatch "
            "rules and Alertmanager delivers them. Alarm when it stops arriving.",
            "1",
        ),
    ]
