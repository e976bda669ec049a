"""Where the engine listens (Docker's DOCKER_HOST or current context, or Podman's socket), and what to say when
nothing answers there."""

from __future__ import annotations

import os

from runner.backends.docker.podman import podman_address


def engine_address(kind: str | None = None) -> str:
    """Where the SDK looks for the engine: Podman's socket for `engine: podman`; else DOCKER_HOST, else
    the current Docker context."""
    if kind == "podman":
        return podman_address()
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    try:
        from docker.context import ContextAPI
        context = ContextAPI.get_current_context()
        return f"{context.Host} (context {context.name})" if context and context.Host else "unix:///var/run/docker.sock"
    except Exception:  # noqa: BLE001 - a broken CLI config (or no SDK) only makes this description vaguer
        return "unix:///var/run/docker.sock"


def engine_hint(kind: str | None = None) -> str:
    where = engine_address(kind)
    if kind == "podman":
        return (f"no Podman API answers at {where}: start it with `podman system service --time=0 {where} &` "
                "(scripts/podman-up.sh, as root), or set MATRIX_PODMAN_HOST to where it listens")
    return (f"no Docker engine answers at {where}: start one with `make services` "
            "(scripts/docker-up.sh, as root) or `sudo dockerd &`, or point DOCKER_HOST at a running engine")
