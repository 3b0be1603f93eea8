"""Check ids, their runbook sections and the report's vocabulary; summary and exit code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mirrorwatch.doctor.gpu_checks import CHECK_IDS
from mirrorwatch.doctor.model import Check, Outcome, runbook_anchor
from mirrorwatch.doctor.probes import PROBE_IDS
from mirrorwatch.doctor.tf_checks import TF_CHECK_IDS
from mirrorwatch.exporter.simulate.scenario import builtin_scenarios
from mirrorwatch.report.evidence import KINDS
from tests.doctor.run import doctor_json

RUNBOOK = Path(__file__).parents[2] / "docs" / "runbook.md"
ALL_IDS = (*CHECK_IDS, *TF_CHECK_IDS, *PROBE_IDS)


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: github-slugger (what github.com runs) lower-
    cases, drops every character but letters, digits, spaces, '-' and '_', and turns spaces
    into '-' (github-slugger/index.js, its `regex` of removed characters)."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, re.MULTILINE):
        anchors.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return anchors


def test_every_check_has_its_runbook_section() -> None:
    anchors = github_anchors(RUNBOOK.read_text(encoding="utf-8"))
    missing = [i for i in ALL_IDS if runbook_anchor(i).partition("#")[2] not in anchors]
    assert missing == []


def test_every_id_a_built_in_host_gives_is_a_known_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen = set()
    for name in builtin_scenarios():
        _, document = doctor_json(capsys, "--simulate", name)
        seen |= {c["id"] for c in document["checks"]}
    assert seen - set(ALL_IDS) == set()
    assert set(CHECK_IDS) - {"nvml.gpus"} <= seen | {"gpu_error.lost"}


def test_a_cause_the_report_names_uses_the_report_s_word() -> None:
    # The causes both name: the doctor before the run, the report's findings after it.
    shared = {
        "imbalance",
        "thermal_throttling",
        "power_capping",
        "hardware_slowdown",
        "temperature_headroom",
        "pcie_degraded",
        "interconnect",
        "gpu_error",
        "foreign_process",
    }
    prefixes = {check_id.partition(".")[0] for check_id in ALL_IDS}
    assert prefixes & set(KINDS) == shared


def test_exit_code_is_1_only_when_a_check_fails() -> None:
    passing = Check("persistence_mode", "pass", "on", "on")
    warning = Check("interconnect.numa", "warn", "two nodes", "one node")
    failing = Check("pcie_degraded.width", "fail", "x8 of x16", "x16", gpu="1")
    assert Outcome([passing, warning]).exit_code == 0
    assert Outcome([passing, failing]).exit_code == 1
    assert Outcome([passing, warning, failing]).summary == {
        "pass": 1,
        "warn": 1,
        "fail": 1,
        "skip": 0,
    }
