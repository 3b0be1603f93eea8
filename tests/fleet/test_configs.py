"""The fleet's configuration files, checked by the programs that read them.

vmagent's `-promscrape.config.dryRun` with `-promscrape.config.strictParse` (unknown fields are
errors), promtool's agent-mode config check, and vmalert's `-dryRun`, which parses every rule
of the generated file as MetricsQL and validates its annotation templates.
"""

from __future__ import annotations

import subprocess

from tests.alerts.tools import RULES
from tests.fleet.fleet import PROMETHEUS_AGENT_CONFIG, VMAGENT_CONFIG, binary
from tests.hang import HANG_SECONDS

HOST_ENV = {"PATH": "/usr/bin:/bin", "MIRRORWATCH_HOST": "gpu-01", "MIRRORWATCH_CLUSTER": "lab"}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=HANG_SECONDS, env=env, check=False
    )


def test_vmagent_accepts_the_scrape_config_strictly() -> None:
    result = run(
        binary("vmagent"),
        f"-promscrape.config={VMAGENT_CONFIG}",
        "-promscrape.config.dryRun",
        "-promscrape.config.strictParse",
        "-loggerLevel=ERROR",
        env=HOST_ENV,
    )
    assert result.returncode == 0, result.stderr


def test_promtool_accepts_the_prometheus_agent_config() -> None:
    result = run(binary("promtool"), "check", "config", "--agent", str(PROMETHEUS_AGENT_CONFIG))
    assert result.returncode == 0, result.stdout + result.stderr


def test_vmalert_accepts_every_generated_rule_and_template() -> None:
    result = run(binary("vmalert"), f"-rule={RULES}", "-dryRun", "-loggerLevel=ERROR")
    assert result.returncode == 0, result.stderr
