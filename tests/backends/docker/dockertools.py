"""Helpers of the docker tests: the CLI as a user runs it, matrix files, stored rows."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from runner.store import Store

ROOT = Path(__file__).resolve().parents[3]
IMAGE = "matrix/debian-torch:1.13"

def cli(*args: str, cwd: Path, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`matrix ARGS` as a user runs it, from this interpreter and this checkout."""
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=cli_env())
    if check and proc.returncode != 0:
        raise AssertionError(f"matrix {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def write_matrix(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


def rows(db: Path, latest_only: bool = True) -> list[dict[str, Any]]:
    with Store(db, create=False) as store:
        return [r.columns() for r in store.rows(latest_only=latest_only)]  # the stored columns, to assert on
