"""The backend registry: backends are looked up by the name used in matrix.yaml.

A backend's module is imported only when something asks for that name (a matrix that uses it,
or `matrix doctor` / `matrix clean`, which ask for every name): a matrix of local environments
never imports the Docker SDK. Registering one name twice is an error, not a silent overwrite.
"""

from __future__ import annotations

from runner.backends.base import Backend, Probe, Sink
from runner.base.registry import Registry

# Where each built-in backend lives; importing the module registers its class.
MODULES: dict[str, str] = {
    "local": "runner.backends.local",
    "docker": "runner.backends.docker",
    "slurm": "runner.backends.slurm",
}
REGISTRY: Registry[type[Backend]] = Registry("backend", MODULES)


def register(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make the backend available under `cls.kind`."""
    return REGISTRY.register(cls.kind, cls, rename="kind")


def kinds() -> list[str]:
    """Every backend name, without importing any backend."""
    return REGISTRY.names()


def get(kind: str) -> type[Backend]:
    """The backend class for a name, importing its module the first time."""
    return REGISTRY.get(kind)


def loaded() -> list[str]:
    """The backend names whose modules have been imported so far."""
    return REGISTRY.loaded()


__all__ = ["MODULES", "REGISTRY", "Backend", "Probe", "Sink", "get", "kinds", "loaded", "register"]
