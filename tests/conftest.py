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


# Run in two processes (`make test`: pytest-xdist, `-n 2`), the tests of one service run one at a time on one
# worker, in their file's order: two Slurm tests at once would wait on one cluster's slots and drain each other's
# nodes, and the container tests build, load and clean up images on the same engines. Every other test file is a
# unit of its own (its module's fixtures made once), run by whichever worker is free. The units are named from the
# test's path (xdist's own `--dist loadgroup` reads marks it can no longer attach under pytest 9.2), and a test
# marked for a service outside its service's files is refused at collection.
SERVICE_PATHS = {"slurm": ("tests/backends/slurm/", "tests/backends/workloads/test_backend_runs.py"),
                 "docker": ("tests/backends/docker/", "tests/backends/eras/")}


def unit_of(nodeid: str) -> str:
    """The work unit a test runs in: its service's name, else its file."""
    path = nodeid.split("::", 1)[0]
    for service, paths in SERVICE_PATHS.items():
        if path.startswith(paths):
            return service
    return path


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: pytest without xdist (the GPU kit's machine) runs the rest
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class ByUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return ByUnit(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for service in SERVICE_PATHS:
            if item.get_closest_marker(service) is not None and unit_of(item.nodeid) not in (service, "slurm"):
                raise pytest.UsageError(f"{item.nodeid} is marked {service} but runs outside the {service} tests' unit: "
                                        f"add its file to SERVICE_PATHS in tests/conftest.py")
