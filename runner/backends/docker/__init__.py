"""The docker backend, one concern a module:

- `config`: what a docker environment says in matrix.yaml (no Docker SDK needed);
- `engines`: the engines it talks to, one small class each looked up by the name `engine:` takes (`ENGINES`):
  `dockerd` (Docker: DOCKER_HOST or the context, GPUs as device requests) and `podman` (Podman's
  Docker-compatible API: its socket, GPUs as CDI device names);
- `engine`: all of docker-py (the engine session, containers, `exec` processes);
- `payload`: what is copied into a container and run there with the image's python;
- `backend`: `DockerBackend`, one container per environment and one `exec` per rank;
- `host`: `matrix doctor` and `matrix clean` for every engine.
"""

from __future__ import annotations

from runner.backends.docker.backend import DockerBackend
from runner.backends.docker.config import DockerEnvironment, adhoc_environment, image_env_name, parse_gpus

__all__ = ["DockerBackend", "DockerEnvironment", "adhoc_environment", "image_env_name", "parse_gpus"]
