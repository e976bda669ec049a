"""Helpers for the workload tests: the real mlperf-logging package shipped as workload files, a weird
argv value, the CLI as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require

ROOT = Path(__file__).resolve().parents[3]

SCRIPTS = Path(__file__).with_name("scripts")
EXAMPLES = ROOT / "examples" / "workloads"
# Spaces and what a shell would act on: each must reach the program as written (no shell anywhere),
# and a placeholder's spelling inside a value is not a placeholder.
WEIRD = "a b;  echo $(id) `uname` 'q' \"dq\" \\back *.py {files} | > < & #x é"


@pytest.fixture(scope="session")
def mllog_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The installed mlperf_logging's mllog as a folder to ship with a workload (images lack the package)."""
    try:
        import mlperf_logging.mllog as mllog
    except ImportError:
        require(False, "mlperf-logging is not installed (the dev extra has it: pip install -e '.[dev]')")
        raise
    source = Path(mllog.__file__).parent
    target = tmp_path_factory.mktemp("pkg") / "mlperf_logging"
    (target / "mllog").mkdir(parents=True)
    (target / "__init__.py").write_text("")
    for name in ("__init__.py", "mllog.py", "constants.py"):
        shutil.copy(source / name, target / "mllog" / name)
    return target


def cli(*args: str, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def rows(db: Path) -> list[dict[str, Any]]:
    from runner.store import Store

    with Store(db, readonly=True) as store:
        return [r.columns() for r in store.rows()]  # the stored columns, to assert on


def received_argv(log_tail: str) -> list[str]:
    """The argv the test script printed it received."""
    for line in log_tail.splitlines():
        if line.startswith("received argv: "):
            return list(json.loads(line[len("received argv: "):]))
    raise AssertionError(f"the script printed no argv:\n{log_tail}")
