"""Fixtures for the slurm tests: a real Slurm with accounting (scripts/slurm-up.sh, `make services`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require

BARE_PYTHON = Path("/usr/bin/python3")  # Debian's python3-torch (PyTorch 1.13): the bare-metal side


def _answers(args: list[str]) -> tuple[bool, str]:
    if shutil.which(args[0]) is None:
        return False, f"{args[0]} not on PATH"
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return False, f"{args[0]} did not answer within 30 s"
    return proc.returncode == 0, (proc.stderr or proc.stdout).strip()[:300]


@pytest.fixture(scope="session")
def slurm() -> None:
    """sinfo and sacct answer and the node takes jobs; else skip (fail in CI)."""
    for args in (["sinfo", "-h", "-o", "%t"], ["sacct", "-n", "-X", "-S", "now", "-E", "now"]):
        ok, why = _answers(args)
        require(ok, f"no working Slurm with accounting ({' '.join(args)}: {why}); "
                    "start one with `sudo scripts/slurm-up.sh` (make services)")
    ok, states = _answers(["sinfo", "-h", "-o", "%t"])
    require(any(s.strip().rstrip("*~#").startswith(("idle", "mix", "alloc")) for s in states.splitlines()),
            f"no Slurm node takes jobs (sinfo says {states!r}); scripts/slurm-up.sh resumes it")


@pytest.fixture(scope="session")
def bare_python(slurm: None) -> str:
    """Debian's /usr/bin/python3 with python3-torch, installed by scripts/slurm-up.sh."""
    ok, why = _answers([str(BARE_PYTHON), "-c", "import torch"])
    require(ok, f"{BARE_PYTHON} cannot import torch ({why}): scripts/slurm-up.sh installs python3-torch")
    return str(BARE_PYTHON)


def bench_processes(under: Path) -> dict[int, int]:
    """pid -> parent pid of every interpreter on this host running a bench zipapp from a folder under `under`
    (the test nodes are slurmd processes on this same kernel, so /proc shows every node's ranks)."""
    found: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        words = [w.decode(errors="replace") for w in argv]
        script = words[1] if len(words) > 1 else ""  # python3 BENCH ARGS: not a shell that has it among its words
        if Path(script).is_relative_to(under) and Path(script).name.startswith("bench-") and script.endswith(".pyz"):
            found[int(entry.name)] = ppid
    return found


@pytest.fixture(scope="module", autouse=True)
def no_orphaned_bench(tmp_path_factory: pytest.TempPathFactory) -> object:
    """After each Slurm module: no bench process of this session is left without the shell that started it
    (a parent of 1: handed to init). Such a rank escaped its job's end (a time limit, scancel, a node's
    failure) and would keep a core busy under every later test. Killed, then reported as this module's
    error."""
    yield None
    base = tmp_path_factory.getbasetemp()
    deadline = time.time() + 20  # Slurm's KillWait is 5 s on the test cluster
    while (orphans := {p for p, pp in bench_processes(base).items() if pp == 1}) and time.time() < deadline:
        time.sleep(1)
    for pid in orphans:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    assert not orphans, f"bench processes outlived their job's shell (parent is init): {sorted(orphans)}"
