"""The era tests run the benchmark (its zipapp) and `matrix run` in real old PyTorch releases (images/recipes.py).

Each test asks for the era images it uses; a missing one is built by images/build.py (downloads
and root filesystems cached in /var/cache/matrix, so a second build takes seconds). No engine or
a failed build skips outside CI and fails in CI (tests/conftest.py's `require`).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
for path in (ROOT, ROOT / "images"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from recipes import BY_NAME, Recipe  # noqa: E402

from tests.backends.eras.eratools import EraBox  # noqa: E402
from tests.conftest import require  # noqa: E402

BUILD_TIMEOUT_S = 1500


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:  # pragma: no cover - docker is a dependency of the runner
        require(False, "the docker SDK is not installed")
        raise
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except (DockerException, OSError) as e:
        require(False, f"no Docker engine answers ({e}): run scripts/docker-up.sh (make services) as root")
        raise
    yield client
    client.close()


def era_image(client: Any, name: str) -> Recipe:
    """The recipe's image on the engine, built (cached rootfs and wheels) when it is missing."""
    from docker.errors import ImageNotFound

    recipe = BY_NAME[name]
    try:
        client.images.get(recipe.tag)
        return recipe
    except ImageNotFound:
        pass
    proc = subprocess.run([sys.executable, str(ROOT / "images" / "build.py"), name], capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        require(False, f"era image {recipe.tag} could not be built: {' | '.join(lines[-3:])}")
    return recipe


@pytest.fixture(scope="session")
def build_era(docker_client: Any) -> Any:
    """era_image for any era a test is parametrized over: the recipe's image, built when it is missing."""
    return lambda name: era_image(docker_client, name)


@pytest.fixture(scope="session")
def image_2018(docker_client: Any) -> Recipe:
    return era_image(docker_client, "2018")


@pytest.fixture(scope="session")
def image_2020(docker_client: Any) -> Recipe:
    return era_image(docker_client, "2020")


@pytest.fixture(scope="session")
def image_2022(docker_client: Any) -> Recipe:
    return era_image(docker_client, "2022")


@pytest.fixture(scope="module")
def box_2018(docker_client: Any, image_2018: Recipe) -> Iterator[EraBox]:
    box = EraBox(docker_client, image_2018)
    yield box
    box.remove()


@pytest.fixture(scope="module")
def box_2020(docker_client: Any, image_2020: Recipe) -> Iterator[EraBox]:
    box = EraBox(docker_client, image_2020)
    yield box
    box.remove()
