"""The docker backend: one long-lived container per environment, one `exec` per repeat.

The container starts at the first task, so that an image or engine problem is the tasks'
outcome (`not_started`) rather than an exception out of the run; it is always killed and
removed when the environment is done. The engine itself is reached only through `engine`.
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from runner.backends import ranks, register
from runner.backends.base import Interrupted, NotStarted, SequentialBackend
from runner.backends.context import RunContext
from runner.backends.docker import engine, host, payload
from runner.backends.docker.config import DockerEnvironment
from runner.backends.docker.engine import ENGINE_ERRORS, Box, Exec
from runner.backends.workloads import Changed, arguments
from runner.backends.workloads.files import FileEntry
from runner.base import safewrite
from runner.domain.bench_contract import RESULT_EXITS
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status, outcome_from_process

MASTER_PORT = 29500
KILL_GRACE_S = 10.0
PROBE_TIMEOUT_S = 120.0


@register
class DockerBackend(SequentialBackend):
    kind = "docker"
    config = DockerEnvironment
    doctor = staticmethod(host.doctor)
    probes = "the Docker SDK, each engine (Docker, Podman), their GPU support, the test image"
    clean = staticmethod(host.clean)

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        super().__init__(env, ctx)
        assert isinstance(env, DockerEnvironment)
        self.denv: DockerEnvironment = env
        self.engine: engine.Engine | None = None
        self.container: Box | None = None
        self.failure: str | None = None  # set once: every later task of this environment is not started
        self.python: str | None = None
        self.python_version: str | None = None
        self.image_facts: dict[str, Any] = {}
        self.logdir = ctx.workdir / "logs" / ctx.run_id
        self.files: tuple[FileEntry, ...] = ()  # the workload's files, put in with the benchmark

    # -- session ---------------------------------------------------------------------------------

    def __enter__(self) -> DockerBackend:
        safewrite.folder(safewrite.folder(self.ctx.workdir / "logs") / self.ctx.run_id)  # never through a link
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Kill and remove every container of this session; safe to call twice."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        self.container = None

    def _engine(self) -> engine.Engine:
        if self.engine is None:
            try:
                self.engine = engine.connect(kind=self.denv.engine)
            except engine.EngineUnavailable as e:
                raise NotStarted(str(e)) from e
        return self.engine

    def prepare(self) -> str | None:
        """Start the container now instead of at the first task; the reason it cannot, or None."""
        try:
            self._ensure_container()
        except NotStarted as e:
            return str(e)
        return None

    def _ensure_container(self) -> Box:
        """The session's running container: started at the first task, restarted if it died."""
        if self.failure:
            raise NotStarted(self.failure)
        try:
            if self.container is not None:
                if self.container.running():
                    return self.container
                self._discard()
            self.container = self._start()
            if self.python is None:
                self._probe_python(self.container)
            return self.container
        except NotStarted as e:
            self.failure = str(e)
            raise
        except ENGINE_ERRORS as e:
            self.failure = f"the Docker engine failed while preparing environment {self.denv.name!r}: {e}"
            raise NotStarted(self.failure) from e

    def _discard(self) -> None:
        if self.container is not None:
            self.container.discard()
        self.container = None

    def _start(self) -> Box:
        session = self._engine()
        env = self.denv
        image = session.image(env.image, env.pull)
        self.image_facts = {"image": env.image, "image_id": image.id, "repo_digest": image.repo_digest,
                            "image_labels": image.labels, **session.facts()}
        spec = engine.BoxSpec(
            image_id=image.id,
            name=f"matrix-{re.sub(r'[^A-Za-z0-9_.-]+', '-', env.name)[:40]}-{uuid.uuid4().hex[:8]}",
            labels={engine.LABEL_MANAGED: "true", engine.LABEL_RUN: self.ctx.run_id, engine.LABEL_ENV: env.name,
                    engine.LABEL_HOST: socket.gethostname(), engine.LABEL_PID: str(os.getpid())},
            env={**env.env, "PYTHONUNBUFFERED": "1"}, network=env.network,
            mounts=[(str(Path(m.source).expanduser().resolve()), m.target, m.read_only) for m in env.mounts],
            gpus=env.gpus, shm_size=env.shm_size, ipc=env.ipc, user=env.user)
        try:
            data = payload.payload(self.files, env.user or image.user)
        except Changed as e:
            raise NotStarted(str(e)) from e
        return session.start(spec, payload.IDLE_COMMANDS, data, what=f"{env.image!r} for environment {env.name!r}")

    def _probe_python(self, box: Box) -> None:
        """Find the interpreter in the image (env.python, else python3, else python) and torch in it."""
        candidates = [self.denv.python] if self.denv.python else ["python3", "python"]
        seen: list[str] = []
        for python in candidates:
            try:
                run = box.exec([python, "-c", payload.PROBE], {}, user=self.denv.user or "")
            except ENGINE_ERRORS as e:
                raise NotStarted(self._exited_early(box, e)) from e
            ranks.wait_ranks([run], time.time() + PROBE_TIMEOUT_S)
            code = run.exit_code()
            out, err = run.text()
            if code != 0:
                seen.append(f"{python}: {(err or out).strip().splitlines()[-1:] or ['exit status ' + str(code)]}")
                if not box.running():
                    raise NotStarted(self._exited_early(box, None))
                continue
            lines = out.split()
            if len(lines) < 3:
                seen.append(f"{python}: unexpected probe output {out!r}")
                continue
            self._accept_python(python, *lines[:3])
            return
        raise NotStarted(f"no Python found in image {self.denv.image!r} (tried {', '.join(candidates)}: "
                         f"{'; '.join(seen)}); set `python` in environment {self.denv.name!r}")

    def _accept_python(self, python: str, executable: str, version: str, torch: str) -> None:
        if tuple(int(p) for p in version.split(".")[:2]) < (3, 6):
            raise NotStarted(f"{executable} in image {self.denv.image!r} is Python {version}; "
                             "the benchmark needs Python 3.6 or newer (set `python` to another interpreter)")
        if torch == "no-torch":
            raise NotStarted(f"{executable} (Python {version}) in image {self.denv.image!r} has no "
                             "torch: use an image with PyTorch, or set `python` to the interpreter that has it")
        self.python, self.python_version = executable or python, version

    def _still_running(self, box: Box, code: int | None) -> bool:
        """Whether the container survived a failed repeat. After a death by signal the engine needs a
        moment to notice that the whole container was killed, so give it that moment."""
        deadline = time.time() + (3.0 if code is None or code >= 128 else 0.0)
        while box.running():
            if time.time() >= deadline:
                return True
            time.sleep(0.1)
        return False

    def _exited_early(self, box: Box, e: Exception | None) -> str:
        logs, state = box.last_words()
        return (f"the container of {self.denv.image!r} stopped right after it started "
                f"(exit code {state.get('ExitCode')}){': ' + logs if logs else ''}{f' ({e})' if e else ''}")

    # -- tasks -----------------------------------------------------------------------------------

    def extra(self) -> dict[str, Any]:
        return {"backend": "docker", **(self.image_facts or {"image": self.denv.image}),
                "container_id": self.container.id if self.container is not None else None,
                "python_executable": self.python}

    def run_one(self, task: Task) -> Outcome:
        if task.cell.workload is not None:  # one workload per environment: its files go in with the benchmark
            self.files = tuple(task.cell.workload.files)
        try:
            box = self._ensure_container()  # NotStarted: the environment cannot start, its tasks are not run
        except KeyboardInterrupt:
            raise Interrupted(ranks.cancelled(Outcome(Status.CANCELLED, extra=self.extra()),
                                              "interrupted (Ctrl-C) while preparing the container")) from None
        if task.cell.nodes > 1:
            now = time.time()
            return Outcome(Status.UNSUPPORTED, reason="the docker backend runs on one host; use a slurm "
                           "environment for nodes > 1", started_at=now, finished_at=now, extra=self.extra())
        mark = f"{self.ctx.run_id}-{task.id}"
        execs: list[Exec] = []
        started = time.time()
        try:
            with ranks.rank_files(self.logdir / task.id, task.cell.gpus) as files:
                try:
                    self._start_ranks(box, task, mark, files, execs)
                except ENGINE_ERRORS as e:
                    self._kill(execs, mark)
                    return self._container_lost(box, execs, started, f"cannot exec in the container: {e}")
                ended = ranks.wait_ranks(execs, started + task.cell.run.timeout, self.ctx.stop)
                if ended is not None:
                    self._kill(execs, mark)
        except KeyboardInterrupt:
            self._kill(execs, mark)
            raise Interrupted(ranks.cancelled(self._collect(execs, started))) from None
        codes = [e.exit_code() for e in execs]
        if ended in (None, "rank") and codes[0] not in RESULT_EXITS and not self._still_running(box, codes[0]):
            return self._container_lost(box, execs, started, None)
        return ranks.settle(self._collect(execs, started), ended, codes, task.cell.run.timeout,
                            where=" in the container")

    def _start_ranks(self, box: Box, task: Task, mark: str, files: Sequence[tuple[Any, Any]],
                     execs: list[Exec]) -> None:
        assert self.python is not None
        world = task.cell.gpus
        argv = [self.python, payload.BENCH_IN, *arguments(task, payload.INSIDE)]
        for rank, (out, err) in enumerate(files):
            env = {**ranks.rank_env({}, rank, world, MASTER_PORT), payload.TASK_VAR: mark}
            execs.append(box.exec(argv, env, out, err, user=self.denv.user or ""))

    def _collect(self, execs: Sequence[Exec], started: float) -> Outcome:
        if not execs:
            return Outcome(Status.FAILED, started_at=started, finished_at=time.time(), extra=self.extra())
        stdout, log = execs[0].text()
        log = ranks.merge_logs(log, [e.text()[1] for e in execs[1:]])
        return outcome_from_process(stdout, log, execs[0].exit_code(), started, time.time(), extra=self.extra())

    def _kill(self, execs: Sequence[Exec], mark: str) -> None:
        """SIGKILL the task's processes inside the container, then wait for their output to end."""
        if self.container is not None and execs:
            self.container.run_detached([self.python or "python3", payload.KILLER_IN, payload.TASK_VAR, mark],
                                        user="0")
        deadline = time.time() + KILL_GRACE_S
        for e in execs:
            e.wait(max(0.0, deadline - time.time()))
            if not e.done:
                e.close()
                e.wait(1.0)

    def _container_lost(self, box: Box, execs: Sequence[Exec], started: float, why: str | None) -> Outcome:
        """The container died under the repeat: a failed result with the log; the next task gets a new one."""
        state = box.state()
        outcome = self._collect(execs, started)
        self._discard()
        desc = f"{state.get('Status', 'gone')}, exit code {state.get('ExitCode')}"
        if state.get("OOMKilled"):
            desc += ", OOM-killed"
        reason = (f"the container {box.short_id} stopped during the repeat ({desc}); "
                  "the remaining tasks run in a fresh container")
        return replace(outcome, status=Status.FAILED, result=None, finished_at=time.time(),
                       reason=reason + (f": {why}" if why else ""))

