"""The docker tests talk to a real engine and the Debian-built test image (scripts/docker-up.sh).

Missing either skips outside CI and fails in CI (tests/conftest.py's `require`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests` is a namespace package found from the checkout's root
    sys.path.insert(0, str(ROOT))

from dockertools import IMAGE  # noqa: E402

from tests.conftest import require  # noqa: E402


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    """A client for a live engine that has the test image; skip (or fail in CI) otherwise."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:  # pragma: no cover - docker is a dependency of the runner
        require(False, "the docker SDK is not installed")
        raise
    try:
        client = docker.from_env(timeout=60)
        client.ping()
    except (DockerException, OSError) as e:
        require(False, f"no Docker engine answers ({e}): run scripts/docker-up.sh (make services) as root")
        raise
    try:
        client.images.get(IMAGE)
    except ImageNotFound:
        require(False, f"test image {IMAGE} is missing: run images/debian-torch/build.sh (make services)")
    yield client
    client.close()


@pytest.fixture
def run_label_gone(docker_client: Any) -> Any:
    """Asserts that no container of a run (by its label) is left, and removes any it finds."""

    def check(run_id: str | None = None) -> list[str]:
        filters = ["matrix.managed=true"] + ([f"matrix.run_id={run_id}"] if run_id else [])
        left = docker_client.containers.list(all=True, filters={"label": filters})
        names = [c.name for c in left]
        for c in left:
            c.remove(force=True)
        return names

    return check
