"""Shared test helpers: services that are missing skip outside CI and fail in CI."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# A test suite started in the background by a non-interactive shell (`make test &`, a CI runner's job) inherits Ctrl-C
# ignored, and so would every `matrix run` a test starts and interrupts: the Ctrl-C tests would see their runs
# finish untouched. The tests' own processes take Ctrl-C as a terminal would deliver it (a handler, unlike an
# ignored signal, is reset to the default in a child at exec).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def require(available: bool, reason: str) -> None:
    """Skip with the reason outside CI; in CI (CI=true) a missing service is a failure."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"required service missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture
def matrix_cmd() -> list[str]:
    """How to invoke the CLI as a user would, from this interpreter."""
    return [sys.executable, "-m", "runner.cli"]
