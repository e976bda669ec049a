"""Fixtures for the slurm tests: a real Slurm with accounting (scripts/slurm-up.sh, `make services`)."""

from __future__ import annotations

import shutil
import subprocess
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
