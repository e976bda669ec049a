"""The docker backend: one long-lived container per environment, one `exec` per repeat.

All of matrix's docker-py lives here. The client comes from `docker.from_env()`, so
DOCKER_HOST and the current Docker context are respected; the `docker` CLI is never run.
A container is labelled with the run id so that `matrix clean` can reap what a killed run
left behind, and it is always killed and removed when the environment is done.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

import docker
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.models.containers import Container
from docker.models.images import Image
from docker.types import DeviceRequest, Mount
from docker.utils import parse_repository_tag
from pydantic import field_validator

from runner.backends import register
from runner.backends.base import Check, Interrupted, SequentialBackend
from runner.backends.local import rank_env
from runner.bench import BENCH_PATH
from runner.errors import BackendError, ConfigError
from runner.results import Outcome, Status, outcome_from_process
from runner.spec import EnvironmentBase, RunContext, Task

LABEL_MANAGED = "matrix.managed"
LABEL_RUN = "matrix.run_id"
LABEL_ENV = "matrix.environment"
LABEL_HOST = "matrix.host"
LABEL_PID = "matrix.pid"
TEST_IMAGE = "matrix/debian-torch:1.13"

INSIDE = "/tmp/matrix"  # where bench.py and the helper land in the container
BENCH_IN = f"{INSIDE}/bench.py"
KILLER_IN = f"{INSIDE}/kill_task.py"
TASK_VAR = "MATRIX_TASK"  # marks every process of one repeat, so it can be found and killed
MASTER_PORT = 29500
API_TIMEOUT = 120
# What a call to the engine may raise besides its answers: requests' errors are OSErrors.
ENGINE_ERRORS = (DockerException, OSError)
KILL_GRACE_S = 10.0
RANK_GRACE_S = 10.0

# Runs with the image's python (3.6 in 2018 images, 2.7 would do): it SIGKILLs every process whose
# environment carries the task's mark, children included, since `exec` itself has no timeout or kill.
KILLER = b'''import os, signal, sys
mark = ("%s=" % sys.argv[1]).encode() + sys.argv[2].encode()
me = os.getpid()
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) == me:
        continue
    try:
        with open("/proc/%s/environ" % pid, "rb") as f:
            env = f.read().split(b"\\0")
    except (IOError, OSError):
        continue
    if mark in env:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
'''

# Where is python, which version, is torch importable (found, not imported: importing costs ~2 s).
PROBE = ('import sys\nprint(sys.executable)\nprint("%d.%d.%d" % tuple(sys.version_info[:3]))\n'
         'try:\n    import importlib.util as u\n    print("torch" if u.find_spec("torch") else "no-torch")\n'
         'except Exception:\n    print("unknown")\n')
IDLE_PY = "import time\nwhile True:\n    time.sleep(3600)\n"
IDLE_COMMANDS = (["sleep", "infinity"], ["python3", "-c", IDLE_PY], ["python", "-c", IDLE_PY])

NO_GPU_RUNTIME = (
    "environment {env!r} asks for GPUs (gpus: {gpus}) but this Docker engine has no NVIDIA runtime "
    "({detail}). Install the NVIDIA Container Toolkit (apt-get install nvidia-container-toolkit), "
    "configure it with `nvidia-ctk runtime configure --runtime=docker` and restart dockerd; "
    "or drop `gpus` to run on the CPU."
)


class DockerEnvironment(EnvironmentBase):
    backend: Literal["docker"] = "docker"
    image: str
    gpus: Literal["all"] | int | list[int] | None = None
    shm_size: str | None = "8g"
    ipc: str | None = None
    network: str = "none"
    user: str | None = None
    pull: Literal["missing", "always", "never"] = "missing"
    measured_fields = ("image", "gpus")

    @field_validator("gpus")
    @classmethod
    def _gpus_sensible(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise ValueError("gpus: a count of 0 or more, `all`, or a list of device ids")
        if isinstance(value, list) and (not value or any(i < 0 for i in value)):
            raise ValueError("gpus: a list of device ids needs at least one id, each 0 or more")
        return value

    @field_validator("network")
    @classmethod
    def _network_named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("network: a Docker network name such as none, bridge or host")
        return value


def adhoc_environment(image: str, gpus: str | None = None) -> DockerEnvironment:
    """The environment `matrix run --image IMAGE [--gpus all|N|0,1]` runs in, named after the image."""
    image = image.strip()
    if not image:
        raise ConfigError("--image needs an image reference, e.g. nvcr.io/nvidia/pytorch:24.10-py3")
    return DockerEnvironment(name=image_env_name(image), image=image, gpus=parse_gpus(gpus),
                             tags=["container", "adhoc"])


def image_env_name(image: str) -> str:
    """A readable environment name from an image reference: nvcr.io/nvidia/pytorch:18.07-py3 → pytorch-18.07-py3."""
    repo, ref = parse_repository_tag(image)
    base = repo.rsplit("/", 1)[-1]
    if ref and ref.startswith("sha256:"):
        ref = "sha256-" + ref.split(":", 1)[1][:12]
    name = f"{base}-{ref}" if ref else base
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "image"


def parse_gpus(value: str | None) -> Literal["all"] | int | list[int] | None:
    """`--gpus` as docker spells it: all, a count, or device ids (0,1 or device=0,1)."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("", "none"):
        return None
    if text == "all":
        return "all"
    explicit = text.startswith("device=")
    if explicit:
        text = text.split("=", 1)[1].strip("\"'")
    try:
        if explicit or "," in text:
            ids = [int(p) for p in text.split(",") if p.strip()]
            if not ids or any(i < 0 for i in ids):
                raise ValueError(value)
            return ids
        count = int(text)
        if count < 0:
            raise ValueError(value)
    except ValueError:
        raise ConfigError(f"--gpus {value!r}: allowed: all, a count (2), or device ids (0,1 or device=0)") from None
    return count or None


def device_requests(gpus: Literal["all"] | int | list[int] | None) -> list[DeviceRequest]:
    if gpus is None or gpus == 0:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, list):
        return [DeviceRequest(device_ids=[str(i) for i in gpus], capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


def connect(timeout: int = API_TIMEOUT) -> docker.DockerClient:
    """A client for the engine DOCKER_HOST or the current context points at; it must answer."""
    client = docker.from_env(timeout=timeout)
    client.ping()
    return client


def engine_address() -> str:
    """Where the SDK looks for the engine: DOCKER_HOST, else the current Docker context."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    try:
        from docker.context import ContextAPI
        context = ContextAPI.get_current_context()
        return f"{context.Host} (context {context.name})" if context and context.Host else "unix:///var/run/docker.sock"
    except Exception:  # noqa: BLE001 - a broken CLI config only makes this description vaguer
        return "unix:///var/run/docker.sock"


def engine_hint() -> str:
    where = engine_address()
    return (f"no Docker engine answers at {where}: start one with `make services` "
            "(scripts/docker-up.sh, as root) or `sudo dockerd &`, or point DOCKER_HOST at a running engine")


def payload() -> bytes:
    """bench.py and the kill helper as a tar for put_archive (the /tmp entry itself is left alone)."""
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        folder = tarfile.TarInfo(INSIDE.lstrip("/"))
        folder.type, folder.mode, folder.mtime = tarfile.DIRTYPE, 0o755, now
        tar.addfile(folder)
        for name, data in ((BENCH_IN, Path(BENCH_PATH).read_bytes()), (KILLER_IN, KILLER)):
            info = tarfile.TarInfo(name.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, now
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class EnvironmentFailure(Exception):
    """This environment cannot run tasks (image, engine, GPU runtime, python): each task fails with it."""


class _Exec:
    """One process started with `exec` in the container; a thread drains stdout and stderr apart."""

    def __init__(self, api: Any, container_id: str, argv: list[str], env: dict[str, str],
                 out: IO[bytes] | None = None, err: IO[bytes] | None = None, user: str = "") -> None:
        self.api = api
        self.id: str = api.exec_create(container_id, argv, stdout=True, stderr=True, stdin=False,
                                       tty=False, environment=env, user=user)["Id"]
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.error: BaseException | None = None
        self._files = (out, err)
        self._stream = api.exec_start(self.id, stream=True, demux=True)
        self._thread = threading.Thread(target=self._drain, name=f"exec-{self.id[:12]}", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        out, err = self._files
        try:
            for chunk_out, chunk_err in self._stream:
                if chunk_out:
                    self.stdout += chunk_out
                    if out:
                        out.write(chunk_out)
                        out.flush()
                if chunk_err:
                    self.stderr += chunk_err
                    if err:
                        err.write(chunk_err)
                        err.flush()
        except Exception as e:  # noqa: BLE001 - the socket closed under us (kill, engine gone): output ends
            self.error = e

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def close(self) -> None:
        """Unblock the drain thread when the process cannot be killed (the container is gone)."""
        try:
            self._stream.close()
        except Exception:  # noqa: BLE001, S110 - closing a dead stream may fail any way it likes
            pass

    def exit_code(self) -> int | None:
        """The process's exit status once the engine has it; None if it cannot be known."""
        for _ in range(40):
            try:
                info = self.api.exec_inspect(self.id)
            except ENGINE_ERRORS:
                return None
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            time.sleep(0.05)
        return None

    def text(self) -> tuple[str, str]:
        return self.stdout.decode(errors="replace"), self.stderr.decode(errors="replace")


def wait_all(execs: Sequence[_Exec], deadline: float, stop: threading.Event,
             poll: Callable[[], None] | None = None) -> str | None:
    """Wait until every exec ended; "timeout" or "stop" when the deadline passed or a stop was asked."""
    failed_at: float | None = None
    while True:
        running = [e for e in execs if not e.done]
        if not running:
            return None
        if stop.is_set():
            return "stop"
        now = time.time()
        if now >= deadline:
            return "timeout"
        if failed_at is None and len(running) < len(execs):
            # One rank ended: if it failed, the others may wait forever in a collective.
            if any(e.exit_code() not in (0, None) for e in execs if e.done):
                failed_at = now
        if failed_at is not None and now - failed_at > RANK_GRACE_S:
            return "rank"
        running[0].join(min(0.5, max(0.0, deadline - now)))


@register
class DockerBackend(SequentialBackend):
    kind = "docker"
    config = DockerEnvironment

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        super().__init__(env, ctx)
        assert isinstance(env, DockerEnvironment)
        self.denv: DockerEnvironment = env
        self.client: docker.DockerClient | None = None
        self.container: Container | None = None
        self.failure: str | None = None  # set once: every later task of this environment fails with it
        self.python: str | None = None
        self.python_version: str | None = None
        self.image_facts: dict[str, Any] = {}
        self.created: list[str] = []  # every container id made for this session, removed at the end
        self.logdir = ctx.workdir / "logs" / ctx.run_id

    # -- session ---------------------------------------------------------------------------------

    def __enter__(self) -> DockerBackend:
        # The container starts at the first task, so that an image or engine problem is the
        # tasks' outcome rather than an exception out of the run.
        self.logdir.mkdir(parents=True, exist_ok=True)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Kill and remove every container of this session; safe to call twice."""
        if self.client is not None:
            for cid in self.created:
                try:
                    self.client.api.remove_container(cid, force=True, v=True)
                except ENGINE_ERRORS:
                    pass  # gone already, or `matrix clean` reaps it by its label
            self.created.clear()
            self.container = None
            self.client.close()
            self.client = None

    def _client(self) -> docker.DockerClient:
        if self.client is None:
            try:
                self.client = connect()
            except (DockerException, OSError) as e:
                raise EnvironmentFailure(f"{engine_hint()} ({e})") from e
        return self.client

    def _image(self) -> Image:
        """The image, pulled with a progress display when missing (or when pull: always)."""
        client = self._client()
        ref = self.denv.image
        if self.denv.pull != "always":
            try:
                return client.images.get(ref)
            except ImageNotFound:
                if self.denv.pull == "never":
                    raise EnvironmentFailure(f"image {ref!r} is not on this engine and the environment "
                                             "says pull: never; build or load it first") from None
            except ENGINE_ERRORS as e:
                raise EnvironmentFailure(f"image {ref!r}: {getattr(e, 'explanation', None) or e}") from e
        self._pull(client, ref)
        try:
            return client.images.get(ref)
        except ENGINE_ERRORS as e:
            raise EnvironmentFailure(f"image {ref!r} was pulled but cannot be found: {e}") from e

    def _pull(self, client: docker.DockerClient, ref: str) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        layers: dict[str, tuple[int, int]] = {}
        console = Console(stderr=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=console, transient=False) as progress:
            bar = progress.add_task(f"pulling {ref}", total=None)
            try:
                # The SDK splits the reference itself: no tag means latest, a digest pins the image.
                for event in client.api.pull(ref, stream=True, decode=True):
                    if "error" in event:
                        raise EnvironmentFailure(self._pull_failed(ref, str(event["error"])))
                    layer, status = event.get("id"), event.get("status", "")
                    detail = event.get("progressDetail") or {}
                    if layer and status == "Downloading" and detail.get("total"):
                        layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
                    elif layer and status in ("Download complete", "Pull complete", "Already exists"):
                        done = layers.get(layer, (0, 0))[1]
                        layers[layer] = (done, done)
                    total = sum(t for _, t in layers.values())
                    progress.update(bar, completed=sum(c for c, _ in layers.values()), total=total or None,
                                    description=f"pulling {ref} ({len(layers)} layers)")
            except APIError as e:
                raise EnvironmentFailure(self._pull_failed(ref, str(e.explanation or e))) from e
            except ENGINE_ERRORS as e:
                raise EnvironmentFailure(self._pull_failed(ref, str(e))) from e

    @staticmethod
    def _pull_failed(ref: str, why: str) -> str:
        return (f"image {ref!r} is not on this engine and pulling it failed: {why.strip()}. Check the name "
                "and tag, `docker login` for a private registry, or build/load the image locally (images/)")

    def prepare(self) -> str | None:
        """Start the container now instead of at the first task; the reason it cannot, or None."""
        try:
            self._ensure_container()
        except EnvironmentFailure as e:
            return str(e)
        return None

    def _ensure_container(self) -> Container:
        """The session's running container: started at the first task, restarted if it died."""
        if self.failure:
            raise EnvironmentFailure(self.failure)
        try:
            if self.container is not None:
                try:
                    self.container.reload()
                    if self.container.status == "running":
                        return self.container
                except NotFound:
                    pass
                self._discard(self.container)
            self.container = self._start()
            if self.python is None:
                self._probe_python(self.container)
            return self.container
        except EnvironmentFailure as e:
            self.failure = str(e)
            raise
        except ENGINE_ERRORS as e:
            self.failure = f"the Docker engine failed while preparing environment {self.denv.name!r}: {e}"
            raise EnvironmentFailure(self.failure) from e

    def _discard(self, container: Container) -> None:
        try:
            container.remove(force=True, v=True)
        except ENGINE_ERRORS:
            pass
        if container.id in self.created:
            self.created.remove(container.id)
        self.container = None

    def _start(self) -> Container:
        client = self._client()
        image = self._image()
        self.image_facts = {"image": self.denv.image, "image_id": image.id,
                            "repo_digest": self._repo_digest(image),
                            # matrix's own labels (images/recipes.py: era, release date, versions)
                            "image_labels": {k: v for k, v in sorted((image.labels or {}).items())
                                             if k.startswith("matrix.")}}
        env = self.denv
        mounts = [Mount(target=m.target, source=str(Path(m.source).expanduser().resolve()), type="bind",
                        read_only=m.read_only) for m in env.mounts]
        shared_ipc = bool(env.ipc) and (env.ipc == "host" or str(env.ipc).startswith("container:"))
        options: dict[str, Any] = {
            "labels": {LABEL_MANAGED: "true", LABEL_RUN: self.ctx.run_id, LABEL_ENV: env.name,
                       LABEL_HOST: socket.gethostname(), LABEL_PID: str(os.getpid())},
            "environment": {**env.env, "PYTHONUNBUFFERED": "1"},
            "network_mode": env.network,
            "mounts": mounts,
            "device_requests": device_requests(env.gpus),
            "privileged": False,
            "detach": True,
            "stdin_open": False,
            "tty": False,
        }
        if env.shm_size and not shared_ipc:
            options["shm_size"] = env.shm_size
        if env.ipc:
            options["ipc_mode"] = env.ipc
        if env.user:
            options["user"] = env.user
        data = payload()
        last: Exception | None = None
        for command in IDLE_COMMANDS:
            name = f"matrix-{re.sub(r'[^A-Za-z0-9_.-]+', '-', env.name)[:40]}-{uuid.uuid4().hex[:8]}"
            try:
                container = client.containers.create(str(image.id), command, name=name, **options)
            except ENGINE_ERRORS as e:
                raise EnvironmentFailure(f"cannot create a container of {env.image!r} for environment "
                                         f"{env.name!r}: {getattr(e, 'explanation', None) or e}") from e
            # containers.run(remove=True) leaves a container behind when start fails: track and remove ourselves.
            self.created.append(str(container.id))
            try:
                container.put_archive("/", data)
                container.start()
                return container
            except APIError as e:
                self._discard(container)
                text = str(e.explanation or e)
                if "could not select device driver" in text or "nvidia" in text.lower() and "gpu" in text.lower():
                    raise EnvironmentFailure(NO_GPU_RUNTIME.format(env=env.name, gpus=env.gpus, detail=text)) from e
                if "executable file not found" in text or "no such file or directory" in text:
                    last = e
                    continue
                raise EnvironmentFailure(f"cannot start a container of {env.image!r} for environment "
                                         f"{env.name!r}: {text}") from e
            except BaseException:
                self._discard(container)
                raise
        raise EnvironmentFailure(f"image {env.image!r} has neither `sleep` nor python to keep a container "
                                 f"alive: {last}")

    @staticmethod
    def _repo_digest(image: Image) -> str | None:
        digests = list(image.attrs.get("RepoDigests") or [])
        return digests[0] if digests else None

    def _probe_python(self, container: Container) -> None:
        """Find the interpreter in the image (env.python, else python3, else python) and torch in it."""
        candidates = [self.denv.python] if self.denv.python else ["python3", "python"]
        seen: list[str] = []
        for python in candidates:
            try:
                run = _Exec(self._client().api, str(container.id), [python, "-c", PROBE], {}, user=self.denv.user or "")
            except ENGINE_ERRORS as e:
                raise EnvironmentFailure(self._exited_early(container, e)) from e
            wait_all([run], time.time() + 120, threading.Event())
            code = run.exit_code()
            out, err = run.text()
            if code != 0:
                seen.append(f"{python}: {(err or out).strip().splitlines()[-1:] or ['exit status ' + str(code)]}")
                if not self._running(container):
                    raise EnvironmentFailure(self._exited_early(container, None))
                continue
            lines = out.split()
            if len(lines) < 3:
                seen.append(f"{python}: unexpected probe output {out!r}")
                continue
            executable, version, torch = lines[:3]
            if tuple(int(p) for p in version.split(".")[:2]) < (3, 6):
                raise EnvironmentFailure(f"{executable} in image {self.denv.image!r} is Python {version}; "
                                         "bench.py needs Python 3.6 or newer (set `python` to another interpreter)")
            if torch == "no-torch":
                raise EnvironmentFailure(f"{executable} (Python {version}) in image {self.denv.image!r} has no "
                                         "torch: use an image with PyTorch, or set `python` to the interpreter that has it")
            self.python, self.python_version = executable or python, version
            return
        raise EnvironmentFailure(f"no Python found in image {self.denv.image!r} (tried {', '.join(candidates)}: "
                                 f"{'; '.join(seen)}); set `python` in environment {self.denv.name!r}")

    def _running(self, container: Container) -> bool:
        try:
            container.reload()
            return container.status == "running"
        except ENGINE_ERRORS:
            return False

    def _still_running(self, container: Container, code: int | None) -> bool:
        """Whether the container survived a failed repeat. After a death by signal the engine needs a
        moment to notice that the whole container was killed, so give it that moment."""
        deadline = time.time() + (3.0 if code is None or code >= 128 else 0.0)
        while self._running(container):
            if time.time() >= deadline:
                return True
            time.sleep(0.1)
        return False

    def _exited_early(self, container: Container, e: Exception | None) -> str:
        try:
            logs = container.logs(tail=20).decode(errors="replace").strip()
            state = container.attrs.get("State", {})
        except ENGINE_ERRORS:
            logs, state = "", {}
        return (f"the container of {self.denv.image!r} stopped right after it started "
                f"(exit code {state.get('ExitCode')}){': ' + logs if logs else ''}{f' ({e})' if e else ''}")

    # -- tasks -----------------------------------------------------------------------------------

    def extra(self) -> dict[str, Any]:
        return {"backend": "docker", **(self.image_facts or {"image": self.denv.image}),
                "container_id": self.container.id if self.container is not None else None,
                "python_executable": self.python}

    def run_one(self, task: Task) -> Outcome:
        started = time.time()
        try:
            container = self._ensure_container()
        except EnvironmentFailure as e:
            return Outcome(Status.FAILED, reason=str(e), started_at=started, finished_at=time.time(),
                           extra=self.extra())
        except KeyboardInterrupt:
            raise Interrupted(Outcome(Status.CANCELLED, reason="interrupted (Ctrl-C) while preparing the container",
                                      started_at=started, finished_at=time.time(), extra=self.extra())) from None
        if task.cell.nodes > 1:
            now = time.time()
            return Outcome(Status.UNSUPPORTED, reason="the docker backend runs on one host; use a slurm "
                           "environment for nodes > 1", started_at=now, finished_at=now, extra=self.extra())
        assert self.python is not None
        world = task.cell.gpus
        mark = f"{self.ctx.run_id}-{task.id}"
        argv = [self.python, BENCH_IN, *task.cell.bench_args()]
        stem = self.logdir / task.id
        files: list[IO[bytes]] = []
        execs: list[_Exec] = []
        api = self._client().api
        started = time.time()
        ended: str | None = None
        try:
            try:
                for rank in range(world):
                    out = open(f"{stem}.rank{rank}.out", "wb")
                    err = open(f"{stem}.rank{rank}.log", "wb")
                    files += [out, err]
                    env = {**rank_env({}, rank, world, MASTER_PORT), TASK_VAR: mark}
                    if world > 1 and self.denv.network == "none":
                        # Only loopback exists and the container's hostname may not resolve: tell gloo.
                        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
                    execs.append(_Exec(api, str(container.id), argv, env, out, err, user=self.denv.user or ""))
            except ENGINE_ERRORS as e:
                ended = "start"
                self._kill(execs, mark)
                return self._container_lost(container, execs, started, f"cannot exec in the container: {e}")
            ended = wait_all(execs, started + task.cell.run.timeout, self.ctx.stop)
            if ended is not None:
                self._kill(execs, mark)
        except KeyboardInterrupt:
            self._kill(execs, mark)
            outcome = self._collect(execs, started)
            raise Interrupted(Outcome(Status.CANCELLED, None, outcome.log_tail, "interrupted (Ctrl-C)",
                                      started, time.time(), outcome.extra)) from None
        finally:
            for f in files:
                f.close()
        outcome = self._collect(execs, started)
        if ended == "timeout":
            return Outcome(Status.TIMEOUT, None, outcome.log_tail,
                           f"exceeded the timeout of {task.cell.run.timeout:g} s and was killed in the container",
                           started, time.time(), outcome.extra)
        if ended == "stop":
            return Outcome(Status.CANCELLED, None, outcome.log_tail, "stopped (Ctrl-C)",
                           started, time.time(), outcome.extra)
        codes = [e.exit_code() for e in execs]
        if codes[0] not in (0, 3, 4) and not self._still_running(container, codes[0]):
            return self._container_lost(container, execs, started, None)
        if ended == "rank" or (codes[0] == 0 and any(c != 0 for c in codes[1:])):
            bad = next((c for c in codes[1:] if c != 0), None)
            return Outcome(Status.FAILED, outcome.result, outcome.log_tail,
                           f"a non-zero rank exited with status {bad}", started, time.time(), outcome.extra)
        return outcome

    def _collect(self, execs: Sequence[_Exec], started: float) -> Outcome:
        if not execs:
            return Outcome(Status.FAILED, started_at=started, finished_at=time.time(), extra=self.extra())
        stdout, log = execs[0].text()
        for rank, other in enumerate(execs[1:], start=1):
            text = other.text()[1][-1500:]
            if text.strip():
                log += f"\n--- rank {rank} ---\n{text}"
        return outcome_from_process(stdout, log, execs[0].exit_code(), started, time.time(), extra=self.extra())

    def _kill(self, execs: Sequence[_Exec], mark: str) -> None:
        """SIGKILL the task's processes inside the container, then wait for their output to end."""
        container = self.container
        if container is not None and execs:
            try:
                self._client().api.exec_start(
                    self._client().api.exec_create(str(container.id), [self.python or "python3", KILLER_IN,
                                                                        TASK_VAR, mark], user="0")["Id"])
            except ENGINE_ERRORS:
                pass  # the container is gone: its processes with it
        deadline = time.time() + KILL_GRACE_S
        for e in execs:
            e.join(max(0.0, deadline - time.time()))
            if not e.done:
                e.close()
                e.join(1.0)

    def _container_lost(self, container: Container, execs: Sequence[_Exec], started: float,
                        why: str | None) -> Outcome:
        """The container died under the repeat: a failed result with the log; the next task gets a new one."""
        state: dict[str, Any] = {}
        try:
            state = self._client().api.inspect_container(str(container.id)).get("State", {})
        except ENGINE_ERRORS:
            state = {"Status": "removed"}
        outcome = self._collect(execs, started)
        self._discard(container)
        desc = f"{state.get('Status', 'gone')}, exit code {state.get('ExitCode')}"
        if state.get("OOMKilled"):
            desc += ", OOM-killed"
        reason = (f"the container {container.short_id} stopped during the repeat ({desc}); "
                  "the remaining tasks run in a fresh container")
        if why:
            reason += f": {why}"
        return Outcome(Status.FAILED, None, outcome.log_tail, reason, started, time.time(), outcome.extra)

    # -- host ------------------------------------------------------------------------------------

    @classmethod
    def doctor(cls) -> list[Check]:
        try:
            client = connect(timeout=20)
        except (DockerException, OSError) as e:
            return [Check("docker engine", False, f"{engine_hint()} ({e})")]
        checks: list[Check] = []
        try:
            version = client.version()
            info = client.info()
            checks.append(Check("docker engine", True,
                                f"{version.get('Version')} (API {version.get('ApiVersion')}) at "
                                f"{engine_address()}, storage {info.get('Driver')}, "
                                f"cgroup v{info.get('CgroupVersion', '?')}"))
            runtimes = sorted((info.get("Runtimes") or {}).keys())
            cdi = [d for d in (info.get("CDISpecDirs") or []) if any(Path(d).glob("nvidia*"))]
            smi = shutil.which("nvidia-smi")
            if "nvidia" in runtimes or cdi:
                how = "nvidia runtime" if "nvidia" in runtimes else f"CDI specs in {', '.join(cdi)}"
                checks.append(Check("docker GPU runtime", True, f"{how} (runtimes: {', '.join(runtimes)})"))
            else:
                checks.append(Check("docker GPU runtime", False if smi else None,
                                    f"no NVIDIA runtime (runtimes: {', '.join(runtimes) or 'none'}): environments "
                                    "with `gpus` fail; install the NVIDIA Container Toolkit and run "
                                    "`nvidia-ctk runtime configure --runtime=docker`, then restart dockerd"))
            checks.append(cls._gpus_check(smi))
            try:
                image = client.images.get(TEST_IMAGE)
                checks.append(Check("docker test image", True, f"{TEST_IMAGE} ({image.short_id})"))
            except ImageNotFound:
                checks.append(Check("docker test image", None,
                                    f"{TEST_IMAGE} not built: images/debian-torch/build.sh (make services)"))
        except ENGINE_ERRORS as e:
            checks.append(Check("docker engine", False, f"the engine answered ping but not info: {e}"))
        finally:
            client.close()
        return checks

    @staticmethod
    def _gpus_check(smi: str | None) -> Check:
        if not smi:
            return Check("GPUs for containers", None, "nvidia-smi not found: no NVIDIA GPU on this host")
        try:
            q = subprocess.run([smi, "--query-gpu=index,name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as e:
            return Check("GPUs for containers", False, str(e))
        return Check("GPUs for containers", q.returncode == 0,
                     q.stdout.strip().replace("\n", "; ") or q.stderr.strip())

    @classmethod
    def clean(cls, run_id: str | None = None) -> list[str]:
        """Remove containers left by killed runs (by label); a live run's containers on this host are kept."""
        try:
            client = connect(timeout=30)
        except (DockerException, OSError):
            return []
        removed: list[str] = []
        failed: list[str] = []
        filters = [f"{LABEL_MANAGED}=true"] + ([f"{LABEL_RUN}={run_id}"] if run_id else [])
        try:
            for container in client.containers.list(all=True, filters={"label": filters}):
                labels = container.labels
                if run_id is None and _owner_alive(labels):
                    continue
                try:
                    container.remove(force=True, v=True)
                    removed.append(f"container {container.name} ({container.short_id}, run "
                                   f"{labels.get(LABEL_RUN, '?')}, environment {labels.get(LABEL_ENV, '?')})")
                except NotFound:
                    pass
                except ENGINE_ERRORS as e:
                    failed.append(f"{container.name}: {e}")
        except ENGINE_ERRORS as e:
            failed.append(f"listing containers: {e}")
        finally:
            client.close()
        if failed:
            raise BackendError(f"removed {len(removed)} leftover containers but not these: {'; '.join(failed)}; "
                               "try again, or remove them with `docker rm -f`")
        return removed


def _owner_alive(labels: dict[str, str]) -> bool:
    """Whether the matrix process that made the container still runs (on this host)."""
    if labels.get(LABEL_HOST) != socket.gethostname():
        return False
    try:
        pid = int(labels.get(LABEL_PID, ""))
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
