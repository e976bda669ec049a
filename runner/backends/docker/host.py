"""What `matrix doctor` says about the engines here (the one DOCKER_HOST or the context points at, then every
other registered engine), and what `matrix clean` removes from each of them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from runner.backends.base import Probe
from runner.backends.docker import engine
from runner.backends.docker.engine import ENGINE_ERRORS
from runner.backends.docker.engines import DEFAULT, ENGINES
from runner.base.errors import BackendError

TEST_IMAGE = "matrix/debian-torch:1.13"


def doctor() -> list[Probe]:
    if engine.SDK_MISSING:
        return [Probe("docker SDK", False, engine.SDK_MISSING)]
    checks = [Probe("docker SDK", True, f"docker-py {engine.sdk_version()}")]
    try:
        session = engine.connect(timeout=20)
    except engine.EngineUnavailable as e:
        checks.append(Probe("docker engine", False, str(e)))
        session = None
    seen: set[str] = set()
    if session is not None:
        seen.add(session.kind)
        checks += _engine_checks(DEFAULT, session)
    for name in ENGINES.names():  # every other engine, for the environments that name it
        if name != DEFAULT and name not in seen:
            checks += _named_checks(name)
    return checks


def _engine_checks(name: str, session: engine.Engine) -> list[Probe]:
    """The engine's version and address, what it offers for GPUs, and whether it has the test image. `name`: the
    engine asked for (DEFAULT: whichever DOCKER_HOST or the context points at)."""
    checks: list[Probe] = []
    try:
        version, info = session.describe()
        checks.append(Probe(f"{name} engine", True,
                            f"{session.describe_kind()} (API {version.get('ApiVersion')}) at "
                            f"{engine.engine_address(name)}, storage "
                            f"{info.get('Driver')}, cgroup v{info.get('CgroupVersion', '?')}"))
        smi = shutil.which("nvidia-smi")
        checks.append(session.engine.gpu_check(name, info, smi))
        if name == DEFAULT:
            checks.append(_gpus_check(smi))
        short = session.has_image(TEST_IMAGE)
        checks.append(Probe(f"{name} test image", True, f"{TEST_IMAGE} ({short})") if short else
                      Probe(f"{name} test image", None, f"{TEST_IMAGE} not built: images/debian-torch/build.sh "
                            + ENGINES.get(name).bring_up))
    except ENGINE_ERRORS as e:
        checks.append(Probe(f"{name} engine", False, f"the engine answered ping but not info: {e}"))
    finally:
        session.close()
    return checks


def _named_checks(name: str) -> list[Probe]:
    """An engine other than the default one, for the environments that name it (`engine: podman`)."""
    try:
        session = engine.connect(timeout=20, kind=name)
    except engine.EngineUnavailable as e:
        return [ENGINES.get(name).absent(str(e))]
    return _engine_checks(name, session)


def _gpus_check(smi: str | None) -> Probe:
    if not smi:
        return Probe("GPUs for containers", None, "nvidia-smi not found: no NVIDIA GPU on this host")
    try:
        q = subprocess.run([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Probe("GPUs for containers", False, str(e))
    return Probe("GPUs for containers", q.returncode == 0, q.stdout.strip().replace("\n", "; ") or q.stderr.strip())


def clean(run_id: str | None = None) -> list[str]:
    """Remove containers left by killed runs (by label), in Docker and in Podman; a live run's containers
    on this host are kept."""
    removed: list[str] = []
    failed: list[str] = []
    seen: set[str] = set()
    for kind in (None, *(n for n in ENGINES.names() if n != DEFAULT)):
        try:
            session = engine.connect(timeout=30, kind=kind)
        except engine.EngineUnavailable:
            continue
        if session.kind in seen or session.address in seen:  # DOCKER_HOST already pointed at Podman
            session.close()
            continue
        seen |= {session.kind, session.address}
        _reap(session, run_id, removed, failed)
    if failed:
        raise BackendError(f"removed {len(removed)} leftover containers but not these: {'; '.join(failed)}; "
                           "try again, or remove them with `docker rm -f` (or `podman rm -f`)")
    return removed


def _reap(session: engine.Engine, run_id: str | None, removed: list[str], failed: list[str]) -> None:
    labels = [f"{engine.LABEL_MANAGED}=true"] + ([f"{engine.LABEL_RUN}={run_id}"] if run_id else [])
    where = "" if session.kind == DEFAULT else f" in {session.kind}"
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
