"""The suite's own units of work (tests/conftest.py): under `make test` (pytest-xdist, two workers) the tests of
one service run one at a time on one worker; every other file is a unit of its own."""

from __future__ import annotations

import pytest

from tests.conftest import unit_of


@pytest.mark.parametrize(("nodeid", "unit"), [
    ("tests/backends/slurm/test_slurm_backend.py::test_small_matrix", "slurm"),
    ("tests/backends/slurm/test_slurm_multinode.py::test_x[a-b]", "slurm"),
    ("tests/backends/workloads/test_backend_runs.py::test_y[docker]", "slurm"),
    ("tests/backends/docker/test_docker_e2e.py::test_z[podman]", "docker"),
    ("tests/backends/eras/test_era_matrix.py::test_three_eras_run_and_compare", "docker"),
    ("tests/backends/workloads/test_local_runs.py::test_w", "tests/backends/workloads/test_local_runs.py"),
    ("tests/kit/test_kit.py::test_dry_run_runs_every_phase_and_writes_the_report", "tests/kit/test_kit.py"),
])
def test_each_test_has_its_unit(nodeid: str, unit: str) -> None:
    assert unit_of(nodeid) == unit



def test_the_suite_runs_where_xdist_is_not_installed() -> None:
    """The GPU kit runs pytest on a machine that has no xdist: the suite's xdist hook is optional there."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q",
                           "--collect-only", "tests/house/test_groups.py"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
