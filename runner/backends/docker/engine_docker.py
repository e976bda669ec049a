"""Docker's engine (dockerd): reached as the Docker CLI reaches it (DOCKER_HOST, else the current context), GPUs
through its NVIDIA runtime as device requests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.backends.base import Probe
from runner.backends.docker import engine
from runner.backends.docker.engines import EngineKind, register

NO_GPU_RUNTIME = (
    "environment {env!r} asks for GPUs (gpus: {gpus}) but this Docker engine has no NVIDIA runtime "
    "({detail}). Install the NVIDIA Container Toolkit (apt-get install nvidia-container-toolkit), "
    "configure it with `nvidia-ctk runtime configure --runtime=docker` and restart dockerd; "
    "or drop `gpus` to run on the CPU."
)


class DockerKind(EngineKind):
    name = "docker"
    title = "Docker"
    bring_up = "(make services)"

    def address(self) -> str:
        return engine.default_address()

    def base_url(self) -> str | None:
        return None

    def unreachable(self, where: str) -> str:
        return (f"no Docker engine answers at {where}: start one with `make services` "
                "(scripts/docker-up.sh, as root) or `sudo dockerd &`, or point DOCKER_HOST at a running engine")

    def not_this(self) -> str:
        return "unset DOCKER_HOST, or set engine: podman on the environment"

    def recognises(self, components: Sequence[str]) -> bool:
        return "Engine" in components

    def gpu_options(self, gpus: Any) -> dict[str, Any]:
        return {"device_requests": engine.device_requests(gpus)}

    def refused(self, text: str, env: str | None, gpus: Any, what: str, started: bool) -> str | None:
        if started and ("could not select device driver" in text or "nvidia" in text.lower() and "gpu" in text.lower()):
            return NO_GPU_RUNTIME.format(env=env, gpus=gpus, detail=text)
        return None

    def gpu_check(self, label: str, info: dict[str, Any], smi: str | None) -> Probe:
        runtimes = sorted((info.get("Runtimes") or {}).keys())
        cdi = [d for d in (info.get("CDISpecDirs") or []) if any(Path(d).glob("nvidia*"))]
        if "nvidia" in runtimes or cdi:
            how = "nvidia runtime" if "nvidia" in runtimes else f"CDI specs in {', '.join(cdi)}"
            return Probe(f"{label} GPU runtime", True, f"{how} (runtimes: {', '.join(runtimes)})")
        return Probe(f"{label} GPU runtime", False if smi else None,
                     f"no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}): environments "
                     "with `gpus` do not start; install the NVIDIA Container Toolkit and run "
                     "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd")


register(DockerKind())
