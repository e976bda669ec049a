"""What a docker environment says in matrix.yaml, and the ad-hoc one `matrix run --image` makes.

Needs no Docker SDK: a matrix validates on a host without it.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from runner.backends.docker.engines import ENGINES
from runner.base.errors import ConfigError
from runner.domain.cells import EnvironmentBase

Gpus = Literal["all"] | int | list[int] | None


class DockerEnvironment(EnvironmentBase):
    backend: Literal["docker"] = "docker"
    image: str
    gpus: Gpus = None
    shm_size: str | None = "8g"
    ipc: str | None = None
    network: str = "none"
    user: str | None = None
    pull: Literal["missing", "always", "never"] = "missing"
    engine: str | None = Field(
        default=None, description="which engine runs the container, by its registered name (engines.py): docker "
        "(DOCKER_HOST or the Docker context), podman (its Docker-compatible API: MATRIX_PODMAN_HOST, CONTAINER_HOST "
        "or /run/podman/podman.sock); unset: whatever DOCKER_HOST or the context points at")
    measured_fields = ("image", "gpus")

    def identity(self) -> dict[str, Any]:
        """A named engine is part of what is measured; unset keeps the keys cells had before it existed."""
        ident = super().identity()
        if self.engine:
            ident["engine"] = self.engine
        return ident

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str | None) -> str | None:
        if value is not None and value not in ENGINES:
            names = [repr(n) for n in ENGINES.names()]
            raise ValueError(f"{value!r} is not allowed; allowed: {', '.join(names[:-1])} or {names[-1]}")
        return value

    @field_validator("gpus")
    @classmethod
    def _gpus_sensible(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ValueError("gpus: a count of 0 or more, `all`, or a list of device ids")
        if isinstance(value, list) and (not value or any(i < 0 for i in value)):
            raise ValueError("gpus: a list of device ids needs at least one id, each 0 or more")
        return value

    @field_validator("network")
    @classmethod
    def _network_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("network: a Docker network name such as none, bridge or host")
        return value


def adhoc_environment(image: str, gpus: str | None = None) -> DockerEnvironment:
    """The environment `matrix run --image IMAGE [--gpus all|N|0,1]` runs in, named after the image."""
    image = image.strip()
    if not image:
        raise ConfigError("--image needs an image reference, e.g. nvcr.io/nvidia/pytorch:24.10-py3")
    return DockerEnvironment(name=image_env_name(image), image=image, gpus=parse_gpus(gpus),
                             tags=["container", "adhoc"])


def split_reference(image: str) -> tuple[str, str | None]:
    """(repository, tag or digest) as Docker splits an image reference (docker.utils.parse_repository_tag)."""
    repo, at, digest = image.rpartition("@")
    if at:
        return repo, digest
    repo, colon, tag = image.rpartition(":")
    if colon and "/" not in tag:
        return repo, tag
    return image, None


def image_env_name(image: str) -> str:
    """A readable environment name from an image reference: nvcr.io/nvidia/pytorch:18.07-py3 → pytorch-18.07-py3."""
    repo, ref = split_reference(image)
    base = repo.rsplit("/", 1)[-1]
    if ref and ref.startswith("sha256:"):
        ref = "sha256-" + ref.split(":", 1)[1][:12]
    name = f"{base}-{ref}" if ref else base
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "image"


def parse_gpus(value: str | None) -> Gpus:
    """`--gpus` as docker spells it: all, a count, or device ids (0,1 or device=0,1)."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("", "none"):
        return None
    if text == "all":
        return "all"
    explicit = text.startswith("device=")
    if explicit:
        text = text.split("=", 1)[1].strip("\"'")
    try:
        if explicit or "," in text:
            ids = [int(p) for p in text.split(",") if p.strip()]
            if not ids or any(i < 0 for i in ids):
                raise ValueError(value)
            return ids
        count = int(text)
        if count < 0:
            raise ValueError(value)
    except ValueError:
        raise ConfigError(f"--gpus {value!r}: allowed: all, a count (2), or device ids (0,1 or device=0)") from None
    return count or None
