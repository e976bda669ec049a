"""The backend registry: backends are looked up by the name used in matrix.yaml.

A backend's module is imported only when something asks for that name (a matrix that uses it,
or `matrix doctor` / `matrix clean`, which ask for every name): a matrix of local environments
never imports the Docker SDK. Registering one name twice is an error, not a silent overwrite.
"""

from __future__ import annotations

import importlib

from runner.backends.base import Backend, Check, Sink
from runner.errors import BackendError, ConfigError

# Where each built-in backend lives; importing the module registers its class.
MODULES: dict[str, str] = {
    "local": "runner.backends.local",
    "docker": "runner.backends.docker",
    "slurm": "runner.backends.slurm",
}
_REGISTRY: dict[str, type[Backend]] = {}


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make the backend available under `cls.kind`."""
    known = _REGISTRY.get(cls.kind)
    if known is not None:
        raise BackendError(f"backend {cls.kind!r} is registered twice: by {known.__module__}.{known.__qualname__} "
                           f"and by {cls.__module__}.{cls.__qualname__}; give one of them another `kind`")
    _REGISTRY[cls.kind] = cls
    return cls


def kinds() -> list[str]:
    """Every backend name, without importing any backend."""
    return sorted(set(MODULES) | set(_REGISTRY))


def get(kind: str) -> type[Backend]:
    """The backend class for a name, importing its module the first time."""
    if kind not in _REGISTRY:
        module = MODULES.get(kind)
        if module is None:
            raise ConfigError(f"unknown backend {kind!r}; allowed: {', '.join(kinds())}")
        importlib.import_module(module)
        if kind not in _REGISTRY:
            raise BackendError(f"{module} did not register a backend named {kind!r}")
    return _REGISTRY[kind]


def loaded() -> list[str]:
    """The backend names whose modules have been imported so far."""
    return sorted(_REGISTRY)


__all__ = ["MODULES", "Backend", "Check", "Sink", "get", "kinds", "loaded", "register"]
