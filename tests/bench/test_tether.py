"""A rank dies with the shell that started it (runner/bench/tether.py): real processes, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.bench import tether

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not Path("/proc/self/ns/pid").exists(), reason="Linux only (PR_SET_PDEATHSIG)")

# The rank: tethered, prints its pid, then computes until killed.
RANK = (f"import os, sys; sys.path.insert(0, {str(ROOT)!r}); from runner.bench import tether; "
        "print(tether.from_environment(), os.getpid(), flush=True)\nwhile True: pass")


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.time() + seconds
    while alive(pid):
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def start_rank(tether_line: str) -> tuple[subprocess.Popen[str], str, int]:
    """bash starts the rank as the Slurm job script does (not exec: the shell waits for it)."""
    script = f'{tether_line}\n"$@"\necho "rank ended: $?"'
    shell = subprocess.Popen(["bash", "-c", script, "rank", sys.executable, "-c", RANK],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert shell.stdout is not None
    state, pid = shell.stdout.readline().split()
    return shell, state, int(pid)


def test_a_tethered_rank_dies_with_its_shell() -> None:
    shell, state, pid = start_rank('export MATRIX_TETHER="$$ $(readlink /proc/self/ns/pid)"')
    try:
        assert state == "armed"
        shell.kill()  # what Slurm's SIGKILL does to the shell; the rank gets nothing from anyone else
        shell.wait(10)
        assert gone_within(pid, 5), "the rank outlived its shell"
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_without_the_tether_the_rank_outlives_its_shell() -> None:
    """The failure the tether exists for, shown: this is what a job script without it leaves on a node."""
    shell, state, pid = start_rank(":")
    try:
        assert state == "None"
        shell.kill()
        shell.wait(10)
        assert not gone_within(pid, 1.5), "the rank died without a tether: this test shows nothing"
    finally:
        os.kill(pid, signal.SIGKILL)


def test_a_shell_of_another_pid_namespace_is_ignored() -> None:
    """A container runtime that passes the variable on: that number names no process of this namespace."""
    shell, state, pid = start_rank('export MATRIX_TETHER="$$ pid:[1]"')
    try:
        assert state == "None"
    finally:
        os.kill(pid, signal.SIGKILL)
        shell.wait(10)


def test_the_variable_is_removed_and_other_parents_disarm() -> None:
    calls: list[tuple[int, int]] = []

    def prctl(option: int, value: int) -> int:
        calls.append((option, value))
        return 0

    env = {tether.ENV: f"{os.getpid()} ns"}
    assert tether.from_environment(env, prctl, getppid=os.getpid, namespace=lambda: "ns") == "armed"
    assert tether.ENV not in env and calls == [(1, signal.SIGKILL)]
    calls.clear()
    env = {tether.ENV: f"{os.getpid()} ns"}  # this process is alive and not our parent: a runtime between
    assert tether.from_environment(env, prctl, getppid=lambda: 1, namespace=lambda: "ns") == "other"
    assert calls == [(1, signal.SIGKILL), (1, 0)], "disarmed"
    for value in ("", "12", "x ns", "12 other-ns"):
        assert tether.from_environment({tether.ENV: value}, prctl, namespace=lambda: "ns") is None


def test_a_program_the_rank_starts_dies_with_the_rank() -> None:
    """preexec: a user's workload (or nvidia-smi) started by the rank goes when the rank is killed."""
    code = (f"import os, subprocess, sys, time; sys.path.insert(0, {str(ROOT)!r}); from runner.bench import tether\n"
            "p = subprocess.Popen([sys.executable, '-c', 'while True: pass'], preexec_fn=tether.preexec(os.getpid()))\n"
            "print(p.pid, flush=True); time.sleep(60)")
    rank = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert rank.stdout is not None
    child = int(rank.stdout.readline())
    try:
        rank.kill()
        rank.wait(10)
        assert gone_within(child, 5), "the program outlived the rank"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
