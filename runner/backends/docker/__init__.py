"""The docker backend, one concern a module:

- `config`: what a docker environment says in matrix.yaml (no Docker SDK needed);
- `engine`: all of docker-py (the engine session, containers, `exec` processes);
- `podman`: where Podman's Docker-compatible API listens, and how it takes GPUs (CDI);
- `payload`: what is copied into a container and run there with the image's python;
- `backend`: `DockerBackend`, one container per environment and one `exec` per rank;
- `host`: `matrix doctor` and `matrix clean` for Docker.
"""

from __future__ import annotations

from runner.backends.docker.backend import DockerBackend
from runner.backends.docker.config import DockerEnvironment, adhoc_environment, image_env_name, parse_gpus

__all__ = ["DockerBackend", "DockerEnvironment", "adhoc_environment", "image_env_name", "parse_gpus"]
