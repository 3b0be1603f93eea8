"""What the exporter reads of /proc: names, PID namespaces, the innermost pid (proc(5))."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mirrorwatch.contract.procfs import (
    INIT_PID_NAMESPACE,
    PROC,
    innermost_pid,
    pid_namespace,
    process_name,
)


def test_the_initial_namespace_is_the_kernels_proc_pid_init_ino() -> None:
    assert INIT_PID_NAMESPACE == 4026531836


def test_a_name_is_the_comm_file_stripped_and_empty_when_gone(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "comm").write_bytes(b"python3\n")
    assert process_name(tmp_path, 42) == "python3"
    assert process_name(tmp_path, 43) == ""


def test_the_namespace_is_the_links_inode_and_none_when_unreadable(tmp_path: Path) -> None:
    (tmp_path / "42" / "ns").mkdir(parents=True)
    os.symlink("pid:[4026532999]", tmp_path / "42" / "ns" / "pid")
    (tmp_path / "43" / "ns").mkdir(parents=True)
    os.symlink("net:[4026532000]", tmp_path / "43" / "ns" / "pid")  # not a pid namespace
    assert pid_namespace(tmp_path, 42) == 4026532999
    assert pid_namespace(tmp_path, 43) is None
    assert pid_namespace(tmp_path, 44) is None


def test_the_innermost_pid_is_nspids_last_field(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text("Name:\tpython3\nNSpid:\t42\t17\t7\n")
    (tmp_path / "43").mkdir()
    (tmp_path / "43" / "status").write_text("Name:\told-kernel\n")  # before Linux 4.1
    assert innermost_pid(tmp_path, 42) == 7
    assert innermost_pid(tmp_path, 43) is None
    assert innermost_pid(tmp_path, 44) is None


def test_reading_a_process_interns_none_of_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pathlib interns each part it parses: a pid interned per process per scrape churns the
    # interpreter's interned-string table until it doubles (bench/rss_bench.py).
    (tmp_path / "42" / "ns").mkdir(parents=True)
    (tmp_path / "42" / "comm").write_bytes(b"python3\n")
    (tmp_path / "42" / "status").write_text("NSpid:\t42\n")
    os.symlink("pid:[4026532999]", tmp_path / "42" / "ns" / "pid")
    interned: list[str] = []
    intern = sys.intern

    def recording_intern(text: str) -> str:
        interned.append(text)
        return intern(text)

    monkeypatch.setattr(sys, "intern", recording_intern)
    assert process_name(tmp_path, 42) == "python3"
    assert innermost_pid(tmp_path, 42) == 42
    assert pid_namespace(tmp_path, 42) == 4026532999
    assert interned == []


def test_this_process_is_read_from_the_real_proc() -> None:
    with open(f"/proc/{os.getpid()}/comm", encoding="utf-8") as comm:
        assert process_name(PROC, os.getpid()) == comm.read().strip()
    assert innermost_pid(PROC, os.getpid()) is not None
    assert pid_namespace(PROC, os.getpid()) == pid_namespace(PROC)
