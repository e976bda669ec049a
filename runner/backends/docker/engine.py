"""All of matrix's docker-py: the engine session, its containers and the processes run in them.

The Docker SDK is an optional extra (`pip install 'matrix-bench[docker]'`); without it this
module still imports, and `connect` says what to install. The client comes from
`docker.from_env()`, so DOCKER_HOST and the current Docker context are respected; the `docker`
CLI is never run. Which engine is asked for, how it is reached, recognised and given GPUs, and what its
refusals mean are the engine's own (engines.py: Docker in dockerd.py, Podman's Docker-compatible API in
podman.py); this module never branches on an engine's name. Every container is labelled with the run id
so that `matrix clean` can reap what a killed run left behind, and a session removes every container it
made when it closes.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from runner.backends.base import NotStarted
from runner.backends.docker.engines import EngineKind, engine, identify
from runner.backends.docker.engines import engine_address as engine_address
from runner.backends.docker.engines import engine_hint as engine_hint

try:
    import docker
    from docker.errors import APIError, DockerException, ImageNotFound, NotFound
    from docker.types import DeviceRequest, Mount

    SDK_MISSING: str | None = None
    # What a call to the engine may raise besides its answers: requests' errors are OSErrors.
    ENGINE_ERRORS: tuple[type[Exception], ...] = (DockerException, OSError)
except ImportError as _e:  # the optional extra is not installed
    SDK_MISSING = (f"the Docker SDK for Python is not installed ({_e}): pip install 'matrix-bench[docker]' "
                   "(make venv installs it)")
    ENGINE_ERRORS = (OSError,)

API_TIMEOUT = 120
LABEL_MANAGED = "matrix.managed"
LABEL_RUN = "matrix.run_id"
LABEL_ENV = "matrix.environment"
LABEL_HOST = "matrix.host"
LABEL_PID = "matrix.pid"

class EngineUnavailable(Exception):
    """No engine answers (or the SDK is missing, or another engine answers than asked for): the
    message says what to do."""


def sdk_version() -> str | None:
    return None if SDK_MISSING else str(getattr(docker, "__version__", "?"))


def default_address() -> str:
    """Where `docker.from_env()` looks for the engine: DOCKER_HOST, else the current Docker context."""
    if os.environ.get("DOCKER_HOST"):
        return os.environ["DOCKER_HOST"]
    try:
        from docker.context import ContextAPI
        context = ContextAPI.get_current_context()
        return f"{context.Host} (context {context.name})" if context and context.Host else "unix:///var/run/docker.sock"
    except Exception:  # noqa: BLE001 - a broken CLI config (or no SDK) only makes this description vaguer
        return "unix:///var/run/docker.sock"


def device_requests(gpus: Any) -> list[Any]:
    """`gpus` of an environment as the engine's device requests (none, all, a count, device ids)."""
    if gpus is None or gpus == 0:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if isinstance(gpus, list):
        return [DeviceRequest(device_ids=[str(i) for i in gpus], capabilities=[["gpu"]])]
    return [DeviceRequest(count=int(gpus), capabilities=[["gpu"]])]


@dataclass(frozen=True)
class ImageFacts:
    id: str
    repo_digest: str | None
    # matrix's own labels (images/recipes.py: era, release date, versions), stored with results
    labels: dict[str, str] = field(default_factory=dict)
    user: str = ""  # the image's own USER ("" is root): whom a workload's files belong to without `user:`


@dataclass(frozen=True)
class BoxSpec:
    """What a container of one environment is made of (no SDK types: `Engine.start` converts; its GPUs go in
    as the engine takes them)."""

    image_id: str
    name: str
    labels: dict[str, str]
    env: dict[str, str]
    network: str
    mounts: Sequence[tuple[str, str, bool]]  # (source on the host, target, read only)
    gpus: Any = None
    shm_size: str | None = None
    ipc: str | None = None
    user: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def options(self, kind: EngineKind) -> dict[str, Any]:
        shared_ipc = bool(self.ipc) and (self.ipc == "host" or str(self.ipc).startswith("container:"))
        options: dict[str, Any] = {
            "labels": self.labels, "environment": self.env, "network_mode": self.network,
            "mounts": [Mount(target=t, source=s, type="bind", read_only=ro) for s, t, ro in self.mounts],
            "privileged": False, "detach": True, "stdin_open": False, "tty": False,
        }
        options.update(kind.gpu_options(self.gpus))
        if self.shm_size and not shared_ipc:
            options["shm_size"] = self.shm_size
        if self.ipc:
            options["ipc_mode"] = self.ipc
        if self.user:
            options["user"] = self.user
        return options


def connect(timeout: int = API_TIMEOUT, kind: str | None = None) -> Engine:
    """A session with an engine that answers: the engine `kind` names (engines.py), else the one DOCKER_HOST
    or the current context points at; with a kind, the engine that answers must be that one."""
    if SDK_MISSING:
        raise EngineUnavailable(SDK_MISSING)
    asked = engine(kind)
    address = asked.address()
    try:
        url = asked.base_url()
        client = docker.DockerClient(base_url=url, timeout=timeout) if url else docker.from_env(timeout=timeout)
        client.ping()
        session = Engine(client, address, client.version(), kind)
    except ENGINE_ERRORS as e:
        raise EngineUnavailable(f"{asked.unreachable(address)} ({e})") from e
    if kind and session.kind != kind:
        session.client.close()
        raise EngineUnavailable(f"the engine at {address} is {session.describe_kind()}, not {kind}: "
                                + asked.not_this())
    return session


class Engine:
    """One session with the engine: the containers it made are removed by `close`."""

    def __init__(self, client: Any, address: str = "", version: dict[str, Any] | None = None,
                 asked: str | None = None) -> None:
        self.client = client
        self.address = address
        self.created: list[str] = []
        version = version or {}
        components = [str(c.get("Name", "")) for c in version.get("Components") or []]
        self.kind = identify(components, asked)  # which engine answered, by its version's components
        self.engine: EngineKind = engine(self.kind)
        self.version = str(version.get("Version", "?"))
        self.api_version = str(version.get("ApiVersion", "?"))

    def describe_kind(self) -> str:
        return f"{self.engine.title} {self.version}"

    def facts(self) -> dict[str, str]:
        """Which engine ran a result: stored with it, in the same words as a Slurm container runtime's."""
        return {"container_runtime": self.kind, "container_runtime_version": self.version}

    def close(self) -> None:
        """Kill and remove every container of this session; safe to call twice."""
        for cid in list(self.created):
            self.remove(cid)
        self.client.close()

    def remove(self, cid: str) -> None:
        try:
            self.client.api.remove_container(cid, force=True, v=True)
        except ENGINE_ERRORS:
            pass  # gone already, or `matrix clean` reaps it by its label
        if cid in self.created:
            self.created.remove(cid)

    # -- images ------------------------------------------------------------------------------

    def image(self, ref: str, pull: str) -> ImageFacts:
        """The image, pulled with a progress display when missing (or when pull: always)."""
        if pull != "always":
            try:
                return _facts(self.client.images.get(ref))
            except ImageNotFound:
                if pull == "never":
                    raise NotStarted(f"image {ref!r} is not on this engine and the environment "
                                     "says pull: never; build or load it first") from None
            except ENGINE_ERRORS as e:
                raise NotStarted(f"image {ref!r}: {getattr(e, 'explanation', None) or e}") from e
        self._pull(ref)
        try:
            return _facts(self.client.images.get(ref))
        except ENGINE_ERRORS as e:
            raise NotStarted(f"image {ref!r} was pulled but cannot be found: {e}") from e

    def _pull(self, ref: str) -> None:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        from runner.base.console import stderr

        layers: dict[str, tuple[int, int]] = {}
        with Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                      console=stderr(), transient=False) as progress:
            bar = progress.add_task(f"pulling {ref}", total=None)
            try:
                # The SDK splits the reference itself: no tag means latest, a digest pins the image.
                for event in self.client.api.pull(ref, stream=True, decode=True):
                    if "error" in event:
                        raise NotStarted(_pull_failed(ref, str(event["error"])))
                    _count_layer(layers, event)
                    total = sum(t for _, t in layers.values())
                    progress.update(bar, completed=sum(c for c, _ in layers.values()), total=total or None,
                                    description=f"pulling {ref} ({len(layers)} layers)")
            except APIError as e:
                raise NotStarted(_pull_failed(ref, str(e.explanation or e))) from e
            except ENGINE_ERRORS as e:
                raise NotStarted(_pull_failed(ref, str(e))) from e

    def has_image(self, ref: str) -> str | None:
        """The short id of a local image, or None."""
        try:
            return str(self.client.images.get(ref).short_id)
        except ImageNotFound:
            return None

    # -- containers --------------------------------------------------------------------------

    def start(self, spec: BoxSpec, commands: Sequence[Sequence[str]], data: bytes, what: str) -> Box:
        """A running container of the spec with `data` (a tar) unpacked at /: the first of `commands`
        the image can run keeps it alive. `what` names the environment in errors."""
        last: Exception | None = None
        options = spec.options(self.engine)
        env = spec.labels.get(LABEL_ENV)
        for command in commands:
            try:
                container = self.client.containers.create(spec.image_id, list(command), name=spec.name, **options)
            except ENGINE_ERRORS as e:
                text = str(getattr(e, "explanation", None) or e)
                reason = self.engine.refused(text, env, spec.gpus, what, started=False)
                raise NotStarted(reason or f"cannot create a container of {what}: {text}") from e
            # containers.run(remove=True) leaves a container behind when start fails: track and remove ourselves.
            self.created.append(str(container.id))
            try:
                container.put_archive("/", data)
                container.start()
                return Box(self, container)
            except APIError as e:
                self.remove(str(container.id))
                text = str(e.explanation or e)
                reason = self.engine.refused(text, env, spec.gpus, what, started=True)
                if reason:
                    raise NotStarted(reason) from e
                if "executable file not found" in text or "no such file or directory" in text:
                    last = e
                    continue
                raise NotStarted(f"cannot start a container of {what}: {text}") from e
            except BaseException:
                self.remove(str(container.id))
                raise
        raise NotStarted(f"{what}: the image has neither `sleep` nor python to keep a container alive: {last}")

    def leftovers(self, labels: Sequence[str]) -> Iterator[Leftover]:
        """Containers (running or not) that carry all these labels (`key=value`)."""
        for container in self.client.containers.list(all=True, filters={"label": list(labels)}):
            yield Leftover(container)

    def describe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The engine's `version` and `info` answers (for `matrix doctor`)."""
        return self.client.version(), self.client.info()


class Leftover:
    """A labelled container found by `matrix clean`."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.labels: dict[str, str] = dict(container.labels)
        self.name = str(container.name)
        self.short_id = str(container.short_id)

    def remove(self) -> bool:
        """Remove it; False when it was gone already."""
        try:
            self.container.remove(force=True, v=True)
        except NotFound:
            return False
        return True


class Box:
    """One running container of a session."""

    def __init__(self, engine: Engine, container: Any) -> None:
        self.engine = engine
        self.container = container
        self.id = str(container.id)
        self.short_id = str(container.short_id)

    def running(self) -> bool:
        try:
            self.container.reload()
            return bool(self.container.status == "running")
        except ENGINE_ERRORS:
            return False

    def state(self) -> dict[str, Any]:
        """The engine's State of the container; {"Status": "removed"} when it is gone."""
        try:
            return dict(self.engine.client.api.inspect_container(self.id).get("State", {}))
        except ENGINE_ERRORS:
            return {"Status": "removed"}

    def last_words(self) -> tuple[str, dict[str, Any]]:
        """The end of the container's own output and its state (why it stopped)."""
        try:
            logs = self.container.logs(tail=20).decode(errors="replace").strip()
            state = self.container.attrs.get("State", {})
        except ENGINE_ERRORS:
            logs, state = "", {}
        return logs, state

    def exec(self, argv: list[str], env: dict[str, str], out: IO[bytes] | None = None,
             err: IO[bytes] | None = None, user: str = "") -> Exec:
        return Exec(self.engine.client.api, self.id, argv, env, out, err, user)

    def run_detached(self, argv: list[str], user: str = "") -> None:
        """Start a process and do not wait for it (the kill helper)."""
        api = self.engine.client.api
        try:
            api.exec_start(api.exec_create(self.id, argv, user=user)["Id"])
        except ENGINE_ERRORS:
            pass  # the container is gone: its processes with it

    def discard(self) -> None:
        self.engine.remove(self.id)


class Exec:
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

    def poll(self) -> tuple[bool, int | None]:
        """(ended, exit status): the `ranks.Rank` view of this process."""
        return (True, self.exit_code()) if self.done else (False, None)

    def wait(self, timeout: float) -> None:
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


def _facts(image: Any) -> ImageFacts:
    digests = list(image.attrs.get("RepoDigests") or [])
    config = image.attrs.get("Config") or {}
    found = getattr(image, "labels", None) or config.get("Labels") or {}
    labels = {k: v for k, v in sorted(found.items()) if k.startswith("matrix.")}
    return ImageFacts(str(image.id), digests[0] if digests else None, labels, str(config.get("User") or ""))


def _count_layer(layers: dict[str, tuple[int, int]], event: dict[str, Any]) -> None:
    """Fold one pull event into the bytes (done, total) per layer."""
    layer, status = event.get("id"), event.get("status", "")
    detail = event.get("progressDetail") or {}
    if layer and status == "Downloading" and detail.get("total"):
        layers[layer] = (int(detail.get("current", 0)), int(detail["total"]))
    elif layer and status in ("Download complete", "Pull complete", "Already exists"):
        done = layers.get(layer, (0, 0))[1]
        layers[layer] = (done, done)


def _pull_failed(ref: str, why: str) -> str:
    return (f"image {ref!r} is not on this engine and pulling it failed: {why.strip()}. Check the name "
            "and tag, `docker login` for a private registry, or build/load the image locally (images/)")
