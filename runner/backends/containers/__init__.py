"""Container runtimes under Slurm, one small class each (`base.Runtime`), looked up by name:

- `spec`: what `container:` of a slurm environment says (no runtime needed to validate it);
- `base`: the interface: how a rank starts, GPU flags, mounts, what a node needs, the image's identity;
- `apptainer`, `pyxis`, `podman`, `charliecloud`: the runtimes;
- `identity`: the hash of a file or directory image, taken by the controller at submission;
- `facts`: what the per-node check recorded, read back into every result;
- `host`: which runtimes `matrix doctor` finds on this host.
"""

from __future__ import annotations

from runner.backends.containers.apptainer import Apptainer
from runner.backends.containers.base import Bind, ImageIdentity, Launch, Runtime
from runner.backends.containers.charliecloud import Charliecloud
from runner.backends.containers.podman import Podman
from runner.backends.containers.pyxis import Pyxis
from runner.backends.containers.spec import RUNTIME_NAMES, ContainerSpec
from runner.errors import BackendError, ConfigError


def _registry(*classes: type[Runtime]) -> dict[str, type[Runtime]]:
    out: dict[str, type[Runtime]] = {}
    for cls in classes:
        if cls.name in out:
            raise BackendError(f"container runtime {cls.name!r} is defined twice: {out[cls.name].__qualname__} "
                               f"and {cls.__qualname__}")
        out[cls.name] = cls
    return out


RUNTIMES = _registry(Apptainer, Pyxis, Podman, Charliecloud)  # in spec.RUNTIME_NAMES order (a test checks)


def runtime(spec: ContainerSpec) -> Runtime:
    """The runtime class for `container.runtime`, holding the spec."""
    try:
        return RUNTIMES[spec.runtime](spec)
    except KeyError:
        raise ConfigError(f"unknown container runtime {spec.runtime!r}; allowed: {', '.join(RUNTIMES)}") from None


__all__ = ["RUNTIMES", "RUNTIME_NAMES", "Bind", "ContainerSpec", "ImageIdentity", "Launch", "Runtime", "runtime"]
