"""The local backend: the benchmark (its zipapp) as a subprocess of this host, in its own process group."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from runner.backends import artifact, ranks, register
from runner.backends.base import Interrupted, NotStarted, Probe, SequentialBackend, not_started
from runner.backends.ranks import rank_env
from runner.backends.workloads import Changed, arguments
from runner.backends.workloads.files import stage
from runner.base import safewrite
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status, outcome_from_process


class LocalEnvironment(EnvironmentBase):
    backend: Literal["local"] = "local"
    cwd: str | None = None


def free_port() -> int:
    """A port for the rendezvous, outside the kernel's ephemeral range (32768+), so no
    outgoing connection can take it between this check and rank 0's bind."""
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def resolve_python(python: str | None) -> str | None:
    """The interpreter to run: the configured one on PATH or by path, else this one."""
    if not python:
        return sys.executable
    if os.sep in python:
        return python if os.access(python, os.X_OK) else None
    return shutil.which(python)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process and every child it started (it leads its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _die_with(parent: int) -> Callable[[], None]:
    """What the child runs before bench starts: ask Linux to kill it when the matrix process dies (a SIGKILL
    leaves that process no chance to clean up), so that no orphan keeps measuring beside the run that takes
    its repeat over. Elsewhere, nothing."""

    def arm() -> None:
        try:
            import ctypes
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the call
            os._exit(1)

    return arm


class _Process:
    """A local rank as `ranks.wait_ranks` sees it."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def poll(self) -> tuple[bool, int | None]:
        code = self.proc.poll()
        return code is not None, code

    def wait(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass


@register
class LocalBackend(SequentialBackend):
    kind = "local"
    config = LocalEnvironment
    probes = "this Python, torch in it, nvidia-smi"

    def __enter__(self) -> LocalBackend:
        python = resolve_python(self.env.python)
        if python is None:
            raise NotStarted(f"python {self.env.python!r} not found on this host (environment {self.env.name!r}: set "
                             "`python` to an interpreter that has torch)")
        self.python: str = python
        self.bench = artifact.path()
        self.logdir = self.ctx.workdir / "logs" / self.ctx.run_id
        safewrite.folder(safewrite.folder(self.ctx.workdir / "logs") / self.ctx.run_id)  # never through a link
        return self

    def run_one(self, task: Task) -> Outcome:
        if task.cell.nodes > 1:
            now = time.time()
            return Outcome(Status.UNSUPPORTED, reason="the local backend runs on one node; "
                           "use a slurm environment for nodes > 1", started_at=now, finished_at=now)
        world = task.cell.gpus
        base = {**os.environ, **self.env.env, "PYTHONUNBUFFERED": "1"}
        staged = self.ctx.workdir.resolve() / "files"
        if task.cell.workload is not None and task.cell.workload.files:
            try:  # the same bytes the cell's key was made from, staged once in the work directory
                stage(task.cell.workload.files, staged)
            except (Changed, OSError) as e:
                return not_started(f"workload files: {e}", {"backend": "local"})
        argv = [self.python, str(self.bench), *arguments(task, str(staged))]
        port = free_port()
        stem = self.logdir / task.id
        procs: list[subprocess.Popen[bytes]] = []
        started = time.time()
        ended: ranks.Ended | None = None
        try:
            with ranks.rank_files(stem, world) as files:
                for rank, (out, err) in enumerate(files):
                    procs.append(subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                                  env=rank_env(base, rank, world, port),
                                                  cwd=getattr(self.env, "cwd", None), start_new_session=True,
                                                  preexec_fn=_die_with(os.getpid())))
                ended = ranks.wait_ranks([_Process(p) for p in procs], started + task.cell.run.timeout,
                                         self.ctx.stop)
                if ended is not None:
                    for proc in procs:
                        kill_group(proc)
        except KeyboardInterrupt:
            for proc in procs:
                kill_group(proc)
            raise Interrupted(ranks.cancelled(self._collect(stem, world, None, started))) from None
        outcome = self._collect(stem, world, procs[0].returncode if procs else None, started)
        return ranks.settle(outcome, ended, [p.returncode for p in procs], task.cell.run.timeout)

    def _collect(self, stem: Path, world: int, rc: int | None, started: float) -> Outcome:
        stdout, log = ranks.read_ranks(stem, world)
        return outcome_from_process(stdout, log, rc, started, time.time(),
                                    extra={"backend": "local", "python_executable": self.python})

    @classmethod
    def doctor(cls) -> list[Probe]:
        checks = [Probe("python", True, f"{sys.executable} ({sys.version.split()[0]})")]
        try:
            probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, "
                                    "torch.cuda.is_available(), torch.cuda.device_count())"],
                                   capture_output=True, text=True, timeout=120)
            if probe.returncode == 0:
                version, cuda, count = probe.stdout.split()
                checks.append(Probe("torch (local)", True, f"{version}, CUDA available: {cuda}, GPUs: {count}"))
            else:
                checks.append(Probe("torch (local)", False, "not importable by this Python: "
                                    "pip install 'matrix-bench[local]' or set `python` per environment"))
        except (OSError, subprocess.TimeoutExpired) as e:
            checks.append(Probe("torch (local)", False, str(e)))
        smi = shutil.which("nvidia-smi")
        if smi:
            q = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
            checks.append(Probe("GPUs (nvidia-smi)", q.returncode == 0, q.stdout.strip().replace("\n", "; ")
                                or q.stderr.strip()))
        else:
            checks.append(Probe("GPUs (nvidia-smi)", None, "nvidia-smi not found: no NVIDIA GPU on this host"))
        return checks

