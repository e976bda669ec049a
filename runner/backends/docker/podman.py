"""Podman's Docker-compatible API, as the docker backend meets it: where it listens, how it takes GPUs
(CDI device names: it ignores Docker's device requests), and what to say when either fails. No Docker
SDK here: engine.py is the one module that speaks to an engine."""

from __future__ import annotations

import os
from typing import Any

# Where Podman's Docker-compatible API listens when nothing says otherwise: root's socket, then the user's.
PODMAN_SOCKETS = ("/run/podman/podman.sock", "{XDG_RUNTIME_DIR}/podman/podman.sock")

NO_CDI = (
    "environment {env!r} asks for GPUs (gpus: {gpus}) as CDI devices ({devices}), and this Podman's "
    "Docker-compatible API did not resolve them ({detail}). Podman 4.3's API takes them for file paths; "
    "use a Podman whose API resolves CDI names, generate the CDI spec with `nvidia-ctk cdi generate "
    "--output=/etc/cdi/nvidia.yaml`, or run this image under Slurm with `container: {{runtime: podman}}` "
    "(podman run --device takes CDI names)."
)
NO_RLIMIT = (" (the engine asks for more open files or processes than this host lets a container have: "
             "set default_ulimits in containers.conf to the host's limits, as scripts/podman-up.sh does)")


def podman_address() -> str:
    """Where Podman's API is: MATRIX_PODMAN_HOST, else CONTAINER_HOST (Podman's own), else the root or
    the user's socket, whichever exists (root's when neither does)."""
    for var in ("MATRIX_PODMAN_HOST", "CONTAINER_HOST"):
        if os.environ.get(var):
            return os.environ[var]
    sockets = [p.format(XDG_RUNTIME_DIR=os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}"))
               for p in PODMAN_SOCKETS]
    return "unix://" + next((p for p in sockets if os.path.exists(p)), sockets[0])


def cdi_devices(gpus: Any) -> list[str]:
    """`gpus` as CDI device names (what Podman takes): all, the first N, or these ids."""
    if gpus is None or gpus == 0:
        return []
    if gpus == "all":
        return ["nvidia.com/gpu=all"]
    ids = gpus if isinstance(gpus, list) else range(int(gpus))
    return [f"nvidia.com/gpu={i}" for i in ids]
