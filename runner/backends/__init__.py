"""The backend registry: backends are looked up by the name used in matrix.yaml."""

from __future__ import annotations

from runner.backends.base import Backend, Check, Sink
from runner.errors import ConfigError

_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    _REGISTRY[cls.kind] = cls
    return cls


def kinds() -> list[str]:
    _load()
    return sorted(_REGISTRY)


def get(kind: str) -> type[Backend]:
    _load()
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise ConfigError(f"unknown backend {kind!r}; allowed: {', '.join(sorted(_REGISTRY))}") from None


def _load() -> None:
    # Import every backend module, even when one was imported directly (and so registered) first.
    from runner.backends import docker, local, slurm  # noqa: F401  (they register themselves)


__all__ = ["Backend", "Check", "Sink", "get", "kinds", "register"]
