"""Podman's Docker-compatible API, as the docker backend meets it: where it listens, how it takes GPUs
(CDI device names: it ignores Docker's device requests), and what to say when either fails. No Docker
SDK here: engine.py is the one module that speaks to an engine."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.backends.base import Probe
from runner.backends.docker.engines import EngineKind, register

# Where Podman's Docker-compatible API listens when nothing says otherwise: root's socket, then the user's.
PODMAN_SOCKETS = ("/run/podman/podman.sock", "{XDG_RUNTIME_DIR}/podman/podman.sock")
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")

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


class PodmanKind(EngineKind):
    name = "podman"
    title = "Podman"
    bring_up = "then scripts/podman-up.sh"

    def address(self) -> str:
        return podman_address()

    def unreachable(self, where: str) -> str:
        return (f"no Podman API answers at {where}: start it with `podman system service --time=0 {where} &` "
                "(scripts/podman-up.sh, as root), or set MATRIX_PODMAN_HOST to where it listens")

    def not_this(self) -> str:
        return "set MATRIX_PODMAN_HOST to Podman's socket"

    def recognises(self, components: Sequence[str]) -> bool:
        # Podman's API answers Docker's calls and names itself in the version's components.
        return any(c.startswith("Podman") for c in components)

    def gpu_options(self, gpus: Any) -> dict[str, Any]:
        return {"devices": cdi_devices(gpus)}  # Podman 4 ignores device requests: no silent CPU run

    def refused(self, text: str, env: str | None, gpus: Any, what: str, started: bool) -> str | None:
        if cdi_devices(gpus) and "nvidia.com/gpu" in text:
            return NO_CDI.format(env=env, gpus=gpus, detail=text, devices=", ".join(cdi_devices(gpus)))
        if started and "setting rlimit" in text:
            return f"cannot start a container of {what}: {text}{NO_RLIMIT}"
        return None

    def gpu_check(self, label: str, info: dict[str, Any], smi: str | None) -> Probe:
        """Podman takes GPUs as CDI devices: a spec from `nvidia-ctk cdi generate` must exist."""
        specs = [str(p) for d in CDI_DIRS for p in sorted(Path(d).glob("nvidia*")) if p.is_file()]
        if specs:
            return Probe(f"{label} GPUs (CDI)", True, f"CDI specs: {', '.join(specs)}")
        return Probe(f"{label} GPUs (CDI)", False if smi else None,
                     f"no NVIDIA CDI spec in {' or '.join(CDI_DIRS)}: environments with `gpus` do not start; "
                     "run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")

    def absent(self, why: str) -> Probe:
        found = shutil.which("podman")
        return Probe("podman engine", None, (f"podman is installed ({found}) but its API does not answer: "
                                             if found else "podman not installed: ") + why)


register(PodmanKind())
