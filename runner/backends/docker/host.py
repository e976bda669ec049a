"""What `matrix doctor` says about Docker here, and what `matrix clean` removes."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

from runner.backends.base import Check
from runner.backends.docker import engine
from runner.backends.docker.engine import ENGINE_ERRORS
from runner.errors import BackendError

TEST_IMAGE = "matrix/debian-torch:1.13"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")


def doctor() -> list[Check]:
    if engine.SDK_MISSING:
        return [Check("docker SDK", False, engine.SDK_MISSING)]
    checks = [Check("docker SDK", True, f"docker-py {engine.sdk_version()}")]
    try:
        session = engine.connect(timeout=20)
    except engine.EngineUnavailable as e:
        checks.append(Check("docker engine", False, str(e)))
        session = None
    if session is not None:
        checks += _engine_checks("docker", session)
    if session is None or session.kind != "podman":
        checks += _podman_checks()
    return checks


def _engine_checks(name: str, session: engine.Engine) -> list[Check]:
    """The engine's version and address, what it offers for GPUs, and whether it has the test image."""
    checks: list[Check] = []
    try:
        version, info = session.describe()
        checks.append(Check(f"{name} engine", True,
                            f"{session.describe_kind()} (API {version.get('ApiVersion')}) at "
                            f"{engine.engine_address(name if name == 'podman' else None)}, storage "
                            f"{info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')}"))
        smi = shutil.which("nvidia-smi")
        checks += [_cdi_check(name, smi) if session.kind == "podman" else _runtime_check(info, smi)]
        if name == "docker":
            checks.append(_gpus_check(smi))
        short = session.has_image(TEST_IMAGE)
        checks.append(Check(f"{name} test image", True, f"{TEST_IMAGE} ({short})") if short else
                      Check(f"{name} test image", None, f"{TEST_IMAGE} not built: images/debian-torch/build.sh "
                            + ("(make services)" if name == "docker" else "then scripts/podman-up.sh")))
    except ENGINE_ERRORS as e:
        checks.append(Check(f"{name} engine", False, f"the engine answered ping but not info: {e}"))
    finally:
        session.close()
    return checks


def _podman_checks() -> list[Check]:
    """Podman's Docker-compatible API, for `engine: podman` environments."""
    try:
        session = engine.connect(timeout=20, kind="podman")
    except engine.EngineUnavailable as e:
        found = shutil.which("podman")
        return [Check("podman engine", None, (f"podman is installed ({found}) but its API does not answer: "
                                              if found else "podman not installed: ") + str(e))]
    return _engine_checks("podman", session)


def _cdi_check(name: str, smi: str | None) -> Check:
    """Podman takes GPUs as CDI devices: a spec from `nvidia-ctk cdi generate` must exist."""
    specs = [str(p) for d in CDI_DIRS for p in sorted(Path(d).glob("nvidia*")) if p.is_file()]
    if specs:
        return Check(f"{name} GPUs (CDI)", True, f"CDI specs: {', '.join(specs)}")
    return Check(f"{name} GPUs (CDI)", False if smi else None,
                 f"no NVIDIA CDI spec in {' or '.join(CDI_DIRS)}: environments with `gpus` do not start; "
                 "run `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")


def _runtime_check(info: dict[str, Any], smi: str | None) -> Check:
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    cdi = [d for d in (info.get("CDISpecDirs") or []) if any(Path(d).glob("nvidia*"))]
    if "nvidia" in runtimes or cdi:
        how = "nvidia runtime" if "nvidia" in runtimes else f"CDI specs in {', '.join(cdi)}"
        return Check("docker GPU runtime", True, f"{how} (runtimes: {', '.join(runtimes)})")
    return Check("docker GPU runtime", False if smi else None,
                 f"no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}): environments "
                 "with `gpus` do not start; install the NVIDIA Container Toolkit and run "
                 "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd")


def _gpus_check(smi: str | None) -> Check:
    if not smi:
        return Check("GPUs for containers", None, "nvidia-smi not found: no NVIDIA GPU on this host")
    try:
        q = subprocess.run([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check("GPUs for containers", False, str(e))
    return Check("GPUs for containers", q.returncode == 0, q.stdout.strip().replace("\n", "; ") or q.stderr.strip())


def clean(run_id: str | None = None) -> list[str]:
    """Remove containers left by killed runs (by label), in Docker and in Podman; a live run's containers
    on this host are kept."""
    removed: list[str] = []
    failed: list[str] = []
    seen: set[str] = set()
    for kind in (None, "podman"):
        try:
            session = engine.connect(timeout=30, kind=kind)
        except engine.EngineUnavailable:
            continue
        if session.kind in seen:  # DOCKER_HOST already pointed at Podman
            session.close()
            continue
        seen.add(session.kind)
        _reap(session, run_id, removed, failed)
    if failed:
        raise BackendError(f"removed {len(removed)} leftover containers but not these: {'; '.join(failed)}; "
                           "try again, or remove them with `docker rm -f` (or `podman rm -f`)")
    return removed


def _reap(session: engine.Engine, run_id: str | None, removed: list[str], failed: list[str]) -> None:
    labels = [f"{engine.LABEL_MANAGED}=true"] + ([f"{engine.LABEL_RUN}={run_id}"] if run_id else [])
    where = " in podman" if session.kind == "podman" else ""
    try:
        for box in session.leftovers(labels):
            if run_id is None and _owner_alive(box.labels):
                continue
            try:
                if box.remove():
                    removed.append(f"container {box.name} ({box.short_id}, run {box.labels.get(engine.LABEL_RUN, '?')}"
                                   f", environment {box.labels.get(engine.LABEL_ENV, '?')}){where}")
            except ENGINE_ERRORS as e:
                failed.append(f"{box.name}: {e}")
    except ENGINE_ERRORS as e:
        failed.append(f"listing containers{where}: {e}")
    finally:
        session.close()


def _owner_alive(labels: dict[str, str]) -> bool:
    """Whether the matrix process that made the container still runs (on this host)."""
    if labels.get(engine.LABEL_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels.get(engine.LABEL_PID, ""))
    except ValueError:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
