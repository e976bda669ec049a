"""The docker tests talk to a real engine and the Debian-built test image (scripts/docker-up.sh).

Every test that uses the engine runs twice: against Docker, and against Podman's Docker-compatible API
(scripts/podman-up.sh), reached as a user would, by DOCKER_HOST. Missing either engine or its test image
skips outside CI and fails in CI (tests/conftest.py's `require`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.backends.docker.dockertools import IMAGE
from tests.conftest import require

ENGINES = ("docker", "podman")


@pytest.fixture(scope="session", params=ENGINES)
def engine_kind(request: pytest.FixtureRequest) -> str:
    """The engine a test runs against: Docker, then Podman's Docker-compatible API."""
    return str(request.param)


def engine_host(kind: str) -> str | None:
    """DOCKER_HOST for this engine: Podman's socket; None for Docker (its own default)."""
    from runner.backends.docker.engine_podman import podman_address

    return podman_address() if kind == "podman" else None


@pytest.fixture(autouse=True)
def _engine_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of the podman run reaches Podman as a user would: DOCKER_HOST, for the backend and the CLI."""
    callspec = getattr(request.node, "callspec", None)
    kind = callspec.params.get("engine_kind") if callspec else None
    host = engine_host(kind) if kind else None
    if host:
        monkeypatch.setenv("DOCKER_HOST", host)


@pytest.fixture(scope="session")
def docker_client(engine_kind: str) -> Iterator[Any]:
    """A client for a live engine that has the test image; skip (or fail in CI) otherwise."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:  # pragma: no cover - docker is a dependency of the runner
        require(False, "the docker SDK is not installed")
        raise
    host = engine_host(engine_kind)
    script = "scripts/podman-up.sh" if engine_kind == "podman" else "scripts/docker-up.sh"
    try:
        client = docker.DockerClient(base_url=host, timeout=60) if host else docker.from_env(timeout=60)
        client.ping()
    except (DockerException, OSError) as e:
        require(False, f"no {engine_kind} engine answers ({e}): run {script} (make services) as root")
        raise
    try:
        client.images.get(IMAGE)
    except ImageNotFound:
        require(False, f"test image {IMAGE} is missing in {engine_kind}: run {script} (make services)")
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
