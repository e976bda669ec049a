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


def doctor() -> list[Check]:
    if engine.SDK_MISSING:
        return [Check("docker SDK", False, engine.SDK_MISSING)]
    sdk = Check("docker SDK", True, f"docker-py {engine.sdk_version()}")
    try:
        session = engine.connect(timeout=20)
    except engine.EngineUnavailable as e:
        return [sdk, Check("docker engine", False, str(e))]
    checks = [sdk]
    try:
        version, info = session.describe()
        checks.append(Check("docker engine", True,
                            f"{version.get('Version')} (API {version.get('ApiVersion')}) at "
                            f"{engine.engine_address()}, storage {info.get('Driver')}, "
                            f"cgroup v{info.get('CgroupVersion', '?')}"))
        smi = shutil.which("nvidia-smi")
        checks += [_runtime_check(info, smi), _gpus_check(smi)]
        short = session.has_image(TEST_IMAGE)
        checks.append(Check("docker test image", True, f"{TEST_IMAGE} ({short})") if short else
                      Check("docker test image", None,
                            f"{TEST_IMAGE} not built: images/debian-torch/build.sh (make services)"))
    except ENGINE_ERRORS as e:
        checks.append(Check("docker engine", False, f"the engine answered ping but not info: {e}"))
    finally:
        session.close()
    return checks


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
    """Remove containers left by killed runs (by label); a live run's containers on this host are kept."""
    try:
        session = engine.connect(timeout=30)
    except engine.EngineUnavailable:
        return []
    removed: list[str] = []
    failed: list[str] = []
    labels = [f"{engine.LABEL_MANAGED}=true"] + ([f"{engine.LABEL_RUN}={run_id}"] if run_id else [])
    try:
        for box in session.leftovers(labels):
            if run_id is None and _owner_alive(box.labels):
                continue
            try:
                if box.remove():
                    removed.append(f"container {box.name} ({box.short_id}, run {box.labels.get(engine.LABEL_RUN, '?')}"
                                   f", environment {box.labels.get(engine.LABEL_ENV, '?')})")
            except ENGINE_ERRORS as e:
                failed.append(f"{box.name}: {e}")
    except ENGINE_ERRORS as e:
        failed.append(f"listing containers: {e}")
    finally:
        session.close()
    if failed:
        raise BackendError(f"removed {len(removed)} leftover containers but not these: {'; '.join(failed)}; "
                           "try again, or remove them with `docker rm -f`")
    return removed


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
