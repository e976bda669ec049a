"""Shared test helpers: services that are missing skip outside CI and fail in CI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


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
