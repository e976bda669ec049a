"""Container runtimes under Slurm, one small class each (`base.Runtime`), looked up by name:

- `config`: what `container:` of a slurm environment says (no runtime needed to validate it);
- `base`: the interface: how a rank starts, GPU flags, mounts, what a node needs, the image's identity;
- `apptainer`, `pyxis`, `podman`, `charliecloud`: the runtimes, each registered by name (`base.RUNTIMES`)
  and imported when its name is first asked for;
- `image_hash`: the hash of a file or directory image, taken by the controller at submission;
- `facts`: what the per-node check recorded, read back into every result;
- `host`: which runtimes `matrix doctor` finds on this host.
"""

from __future__ import annotations

from runner.backends.containers.base import RUNTIMES, Bind, ImageIdentity, Launch, Runtime
from runner.backends.containers.config import RUNTIME_NAMES, ContainerSpec


def runtime(spec: ContainerSpec) -> Runtime:
    """The runtime class for `container.runtime`, holding the spec."""
    return RUNTIMES.get(spec.runtime)(spec)


__all__ = ["RUNTIMES", "RUNTIME_NAMES", "Bind", "ContainerSpec", "ImageIdentity", "Launch", "Runtime", "runtime"]
