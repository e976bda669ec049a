"""The local backend: bench.py as a subprocess of this host, in its own process group."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Literal

from runner.backends import register
from runner.backends.base import Check, Interrupted, SequentialBackend
from runner.bench import BENCH_PATH
from runner.results import Outcome, Status, outcome_from_process
from runner.spec import EnvironmentBase, Task


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


def rank_env(base: dict[str, str], rank: int, world: int, port: int) -> dict[str, str]:
    """The env:// variables torch.distributed reads, for one rank on this host."""
    env = dict(base)
    if world > 1:
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # One host: keep gloo on loopback rather than whatever the hostname resolves to
        # (a Docker bridge coming and going must not break a CPU run).
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


@register
class LocalBackend(SequentialBackend):
    kind = "local"
    config = LocalEnvironment

    def __enter__(self) -> LocalBackend:
        self.python = resolve_python(self.env.python)
        self.logdir = self.ctx.workdir / "logs" / self.ctx.run_id
        self.logdir.mkdir(parents=True, exist_ok=True)
        return self

    def run_one(self, task: Task) -> Outcome:
        now = time.time()
        if self.python is None:
            return Outcome(Status.FAILED, reason=f"python {self.env.python!r} not found on this host "
                           f"(environment {self.env.name!r}: set `python` to an interpreter that has torch)",
                           started_at=now, finished_at=now)
        if task.cell.nodes > 1:
            return Outcome(Status.UNSUPPORTED, reason="the local backend runs on one node; "
                           "use a slurm environment for nodes > 1", started_at=now, finished_at=now)
        world = task.cell.gpus
        base = {**os.environ, **self.env.env, "PYTHONUNBUFFERED": "1"}
        argv = [self.python, str(BENCH_PATH), *task.cell.bench_args()]
        port = free_port()
        stem = self.logdir / task.id
        procs: list[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]] = []
        started = time.time()
        try:
            for rank in range(world):
                out = open(f"{stem}.rank{rank}.out", "wb")
                err = open(f"{stem}.rank{rank}.log", "wb")
                proc = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                        env=rank_env(base, rank, world, port), cwd=getattr(self.env, "cwd", None),
                                        start_new_session=True)
                procs.append((proc, out, err))
            timed_out = self._wait([p for p, _, _ in procs], started + task.cell.run.timeout)
        except KeyboardInterrupt:
            for proc, _, _ in procs:
                kill_group(proc)
            self._close(procs)
            outcome = self._collect(stem, world, None, started)
            raise Interrupted(Outcome(Status.CANCELLED, None, outcome.log_tail, "interrupted (Ctrl-C)",
                                      started, time.time(), outcome.extra)) from None
        finally:
            self._close(procs)
        rc = procs[0][0].returncode if procs else None
        outcome = self._collect(stem, world, rc, started)
        if timed_out:
            return Outcome(Status.TIMEOUT, None, outcome.log_tail,
                           f"exceeded the timeout of {task.cell.run.timeout:g} s and was killed",
                           started, time.time(), outcome.extra)
        if rc == 0 and any(p.returncode != 0 for p, _, _ in procs[1:]):
            bad = next(p.returncode for p, _, _ in procs[1:] if p.returncode != 0)
            return Outcome(Status.FAILED, outcome.result, outcome.log_tail,
                           f"a non-zero rank exited with status {bad}", started, time.time(), outcome.extra)
        return outcome

    def _wait(self, procs: list[subprocess.Popen[bytes]], deadline: float) -> bool:
        """Wait for all processes; on the deadline kill them all and say so."""
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for p in procs:
                    kill_group(p)
                return True
            if proc.returncode != 0:
                # One rank died: the others would wait forever in a collective.
                grace = time.time() + 10
                for p in procs:
                    try:
                        p.wait(timeout=max(0.0, grace - time.time()))
                    except subprocess.TimeoutExpired:
                        kill_group(p)
                return False
        return False

    @staticmethod
    def _close(procs: list[tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]]) -> None:
        for _, out, err in procs:
            out.close()
            err.close()

    def _collect(self, stem: Path, world: int, rc: int | None, started: float) -> Outcome:
        stdout = _read(Path(f"{stem}.rank0.out"))
        log = _read(Path(f"{stem}.rank0.log"))
        for rank in range(1, world):
            other = _read(Path(f"{stem}.rank{rank}.log"))[-1500:]
            if other.strip():
                log += f"\n--- rank {rank} ---\n{other}"
        return outcome_from_process(stdout, log, rc, started, time.time(),
                                    extra={"backend": "local", "python_executable": self.python})

    @classmethod
    def doctor(cls) -> list[Check]:
        checks = [Check("python", True, f"{sys.executable} ({sys.version.split()[0]})")]
        try:
            probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, "
                                    "torch.cuda.is_available(), torch.cuda.device_count())"],
                                   capture_output=True, text=True, timeout=120)
            if probe.returncode == 0:
                version, cuda, count = probe.stdout.split()
                checks.append(Check("torch (local)", True, f"{version}, CUDA available: {cuda}, GPUs: {count}"))
            else:
                checks.append(Check("torch (local)", False, "not importable by this Python: "
                                    "pip install 'matrix-bench[local]' or set `python` per environment"))
        except (OSError, subprocess.TimeoutExpired) as e:
            checks.append(Check("torch (local)", False, str(e)))
        smi = shutil.which("nvidia-smi")
        if smi:
            q = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=60)
            checks.append(Check("GPUs (nvidia-smi)", q.returncode == 0, q.stdout.strip().replace("\n", "; ")
                                or q.stderr.strip()))
        else:
            checks.append(Check("GPUs (nvidia-smi)", None, "nvidia-smi not found: no NVIDIA GPU on this host"))
        return checks


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
