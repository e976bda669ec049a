"""The slurm backend: job arrays on an existing Slurm cluster, results as files on a shared directory.

matrix adds no scheduler: each environment and node shape (gpus, nodes) becomes one `sbatch`
of a rendered script, a job array with one task per repeat. The array index picks a line of a
manifest in the results directory, so the script does not grow with the matrix. Workers write
their output as files (tmp + mv); only the controller reads them and reports outcomes (the
sink writes the database). One `sacct -P` call per poll interval covers every job of the run.

What was submitted is remembered in `<workdir>/slurm/submitted.json` until it is collected,
so a later `matrix run` or `matrix collect` picks up jobs that an earlier, interrupted or
`--no-wait` run left running, and submits only what is missing.

Every Slurm command goes through `_slurm` (an argument list, never a shell).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import Field, field_validator, model_validator

from runner.backends import register
from runner.backends.base import Backend, Check, Sink
from runner.bench import BENCH_PATH
from runner.errors import BackendError, ConfigError
from runner.results import Outcome, Status, outcome_from_process, tail
from runner.spec import EnvironmentBase, RunContext, Task

TEMPLATES = Path(__file__).with_name("templates")
STATE_SCHEMA = 1
DONE_SCHEMA = 1
SACCT_FORMAT = "JobID,State,ExitCode,Elapsed,Start,End,NodeList"

# sacct lags behind the files: a job sacct calls finished may not show its result file yet on a
# network filesystem; and a job sacct does not know at all is lost only after a while.
RESULT_GRACE_S = 30.0
LOST_AFTER_S = 300.0
SBATCH_TIMEOUT_S = 120.0
SACCT_TIMEOUT_S = 120.0

# States in which a job is over (sacct(1), "JOB STATE CODES"); all others are waited on.
FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED",
})
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})

_TIME_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^UNLIMITED$|^INFINITE$", re.IGNORECASE)
_MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
_OPTION_RE = re.compile(r"^(--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])(?:[= ](.*))?$", re.DOTALL)
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BARE_SBATCH_RE = re.compile(r"^[A-Za-z0-9_./:@%+,=\-\[\]]+$")
_JOB_ID_RE = re.compile(r"^\d+$")
_TASK_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_CONTROL = ("\n", "\r", "\0")
# Options the script sets itself from the environment's fields and the cell's layout.
_OWN_OPTIONS = frozenset({
    "--job-name", "-J", "--array", "-a", "--nodes", "-N", "--ntasks-per-node", "--time", "-t",
    "--chdir", "-D", "--output", "-o", "--error", "-e", "--comment", "--partition", "-p",
    "--account", "-A", "--qos", "-q", "--cpus-per-task", "-c", "--mem",
})


def _no_control(value: str | None, what: str) -> str | None:
    if value is not None and any(c in value for c in _CONTROL):
        raise ValueError(f"{what} must be one line (no newline, carriage return or NUL): {value!r}")
    return value


class SlurmEnvironment(EnvironmentBase):
    """An environment on a Slurm cluster: where the jobs go, what they ask for, how they start."""

    backend: Literal["slurm"] = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = Field(default=None, description="Slurm time limit per array task (minutes, HH:MM:SS, "
                             "D-HH:MM); default: the run's timeout rounded up to minutes")
    gpus_per_node: int | None = Field(default=None, ge=0, description="GPUs to request per node; default: the "
                                      "cell's gpus; 0: CPU nodes, gpus: N then means N processes per node")
    gpu_option: Literal["gres", "gpus-per-node"] = "gres"
    cpus_per_task: int | None = Field(default=None, ge=1)
    mem: str | None = Field(default=None, description="memory per node, as sbatch --mem takes it (e.g. 16G)")
    sbatch_options: list[str] = Field(default=[], description="extra sbatch options, one per item: "
                                      "--constraint=a100, --exclusive, --reservation=x")
    setup: list[str] = Field(default=[], description="shell lines run before the benchmark (module load ..., "
                             "source venv/bin/activate): shell by design, inserted as written")
    container: str | None = Field(default=None, description="pyxis/enroot image: srun --container-image")
    results_dir: str | None = Field(default=None, description="a directory every node sees (shared filesystem); "
                                    "each run gets <results_dir>/<run_id>; default <workdir>/slurm")
    poll_interval: float = Field(default=10.0, gt=0, description="seconds between two sacct polls")
    max_array_size: int = Field(default=1000, ge=1, description="array tasks per sbatch (the cluster's "
                                "MaxArraySize - 1 at most)")
    array_parallelism: int | None = Field(default=None, ge=1, description="at most this many tasks of an "
                                          "array run at once (--array=0-N%K)")
    measured_fields = ("partition", "container", "setup", "gpus_per_node")

    @field_validator("time", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and not _TIME_RE.match(value):
            raise ValueError(f"not a Slurm time limit: {value!r}; use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
        return value

    @field_validator("mem")
    @classmethod
    def _mem_text(cls, value: str | None) -> str | None:
        if value is not None and not _MEM_RE.match(value):
            raise ValueError(f"not an sbatch --mem value: {value!r}; use a number with K, M, G or T")
        return value

    @field_validator("partition", "account", "qos", "container", "results_dir")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return _no_control(value, "the value")

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            match = _OPTION_RE.match(option.strip())
            if not match:
                raise ValueError(f"not an sbatch option: {option!r}; write it as --name=value or --flag")
            _no_control(option, "an sbatch option")
            if match.group(1) in _OWN_OPTIONS:
                raise ValueError(f"{match.group(1)} is set by matrix: use the environment's own field "
                                 "(partition, account, qos, time, cpus_per_task, mem) or the gpus/nodes axes")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"not a shell variable name: {name!r}; use letters, digits and _")
        return value

    @model_validator(mode="after")
    def _container_mounts(self) -> SlurmEnvironment:
        if self.container:
            for m in self.mounts:
                for part in (m.source, m.target):
                    if any(c in part for c in ",:") or any(c in part for c in _CONTROL):
                        raise ValueError(f"mount path {part!r}: pyxis --container-mounts cannot take "
                                         "',' or ':' in a path")
        return self


# ---------------------------------------------------------------------------------- the script

def shell_quote(value: object) -> str:
    """bash quoting for every value the script uses (shlex.quote: single quotes, nothing expands)."""
    return shlex.quote(str(value))


def sbatch_quote(value: object) -> str:
    """Quoting as sbatch reads `#SBATCH` lines: it, not bash, parses them.

    sbatch strips single and double quotes and takes a backslash as an escape, also inside quotes;
    an unquoted `#` starts a comment. Nothing is expanded, but a newline would end the line.
    """
    text = str(value)
    if any(c in text for c in _CONTROL):
        raise ConfigError(f"sbatch option value {text!r} has a newline or NUL; #SBATCH values are one line")
    if _BARE_SBATCH_RE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class ArrayJob:
    """Everything one rendered array script says; built by `array_job`, rendered by `render_script`."""

    job_name: str
    comment: str
    array: str
    nodes: int
    ntasks_per_node: int
    time: str
    results_dir: str
    manifest: str
    python: str
    options: tuple[tuple[str, str | None], ...]
    env: tuple[tuple[str, str], ...]
    setup: tuple[str, ...]
    srun_args: tuple[str, ...]


def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["q"] = shell_quote
    env.filters["sbatch"] = sbatch_quote
    return env


def render_script(job: ArrayJob) -> str:
    return _jinja().get_template("slurm.sh.j2").render(**job.__dict__)


def time_limit(env: SlurmEnvironment, timeout_s: float) -> str:
    """The environment's limit, else the run's per-repeat timeout rounded up to whole minutes."""
    if env.time:
        return env.time
    return str(max(1, math.ceil(timeout_s / 60)))


def job_name(env_name: str) -> str:
    """The job's name in squeue: the environment's, with control characters made harmless."""
    return "matrix-" + "".join("?" if (ord(c) < 32 or ord(c) == 127) else c for c in env_name)


def sbatch_options(env: SlurmEnvironment, gpus: int) -> list[tuple[str, str | None]]:
    """The environment's #SBATCH options besides the layout: (option, value or None for a flag)."""
    options: list[tuple[str, str | None]] = []
    for name, value in (("--partition", env.partition), ("--account", env.account), ("--qos", env.qos),
                        ("--cpus-per-task", env.cpus_per_task), ("--mem", env.mem)):
        if value is not None:
            options.append((name, str(value)))
    per_node = gpus if env.gpus_per_node is None else env.gpus_per_node
    if per_node > 0:
        options.append(("--gres", f"gpu:{per_node}") if env.gpu_option == "gres"
                       else ("--gpus-per-node", str(per_node)))
    for raw in env.sbatch_options:
        match = _OPTION_RE.match(raw.strip())
        if not match:
            raise ConfigError(f"environment {env.name!r}: not an sbatch option: {raw!r}")
        options.append((match.group(1), match.group(2)))
    return options


def array_job(env: SlurmEnvironment, *, count: int, gpus: int, nodes: int, time: str, run_id: str,
              results_dir: Path, manifest: str) -> ArrayJob:
    srun: list[str] = []
    if env.container:
        mounts = [f"{results_dir}:{results_dir}"] + [
            f"{m.source}:{m.target}" + (":ro" if m.read_only else "") for m in env.mounts]
        srun += [f"--container-image={env.container}", f"--container-mounts={','.join(mounts)}",
                 f"--container-workdir={results_dir}"]
    array = f"0-{count - 1}" + (f"%{env.array_parallelism}" if env.array_parallelism else "")
    return ArrayJob(job_name=job_name(env.name), comment=f"matrix run {run_id}", array=array,
                    nodes=nodes, ntasks_per_node=gpus, time=time, results_dir=str(results_dir),
                    manifest=manifest, python=env.python or "python3",
                    options=tuple(sbatch_options(env, gpus)), env=tuple(sorted(env.env.items())),
                    setup=tuple(env.setup), srun_args=tuple(srun))


# ---------------------------------------------------------------------------------- Slurm commands

class SlurmError(BackendError):
    """A Slurm command ran and said no."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self.detail = " ".join(stderr.split())[:500] or f"exit status {returncode}"
        hint = ""
        low = stderr.lower()
        if "database" in low or "slurmdbd" in low:
            hint = " (is slurmdbd up, with accounting configured? `sacctmgr show cluster`; here: `make services`)"
        elif "unable to contact slurm controller" in low or "connection refused" in low \
                or "socket timed out" in low or "zero bytes were transmitted" in low:
            hint = " (is slurmctld up? `scontrol ping`; here: `make services`)"
        self.unreachable = bool(hint)
        super().__init__(f"`{args[0]}` failed: {self.detail}{hint}")


def _slurm(args: list[str], *, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command: an argument list (never a shell), a timeout and errors that say what to do."""
    exe = shutil.which(args[0])
    if exe is None:
        raise BackendError(f"`{args[0]}` is not on PATH: run matrix where the Slurm client commands are "
                           "(a login node), or install slurm-client; `make services` starts a one-node "
                           "Slurm on this machine")
    try:
        proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as e:
        raise BackendError(f"`{args[0]}` did not answer within {timeout:g} s: is the Slurm controller "
                           "reachable? (`scontrol ping`)") from e
    except OSError as e:
        raise BackendError(f"cannot run `{args[0]}`: {e}") from e
    if check and proc.returncode != 0:
        raise SlurmError(args, proc.returncode, proc.stderr or proc.stdout)
    return proc


@dataclass(frozen=True)
class SacctRow:
    """One array task as sacct sees it."""

    job: str            # the array's job id
    index: int          # the array task index
    state: str          # first word of State: "CANCELLED by 0" -> CANCELLED
    exit_code: int
    signal: int
    elapsed: str
    start: float | None
    end: float | None
    nodes: str

    @property
    def job_id(self) -> str:
        return f"{self.job}_{self.index}"


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _indices(spec: str) -> list[int]:
    """The indices of an array range as sacct prints it: `[0-3,7,9-10%4]` (the %N is a limit)."""
    out: list[int] = []
    for part in spec.strip("[]").split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out.extend(range(int(first), int(last or first) + 1))
    return out


def parse_sacct(text: str) -> dict[tuple[str, int], SacctRow]:
    """`sacct -P -n -X --format=SACCT_FORMAT` output keyed by (array job id, index).

    Tasks that never started share one row, `123_[4-999]`: PENDING, or CANCELLED when the
    array was cancelled before they ran; each index of the range gets that row's state.
    """
    rows: dict[tuple[str, int], SacctRow] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 7:
            continue
        job_id, state, exit_code, elapsed, start, end, nodes = parts[:7]
        job, sep, index = job_id.partition("_")
        if not sep or not job.isdigit():
            continue
        code, _, sig = exit_code.partition(":")
        for i in [int(index)] if index.isdigit() else _indices(index):
            rows.setdefault((job, i), SacctRow(
                job, i, (state.split() or ["UNKNOWN"])[0], int(code) if code.isdigit() else 0,
                int(sig) if sig.isdigit() else 0, elapsed, _timestamp(start), _timestamp(end), nodes))
    return rows


def sacct(jobs: Sequence[str]) -> dict[tuple[str, int], SacctRow]:
    """The one poll: every array task of these jobs in one sacct call."""
    if not jobs:
        return {}
    proc = _slurm(["sacct", "-P", "-n", "-X", "-j", ",".join(jobs), f"--format={SACCT_FORMAT}"],
                  timeout=SACCT_TIMEOUT_S)
    return parse_sacct(proc.stdout)


# ---------------------------------------------------------------------------------- what was submitted

def state_key(task: Task) -> str:
    return f"{task.cell.env_name}\t{task.cell.key}\t{task.repeat}"


class SubmittedState:
    """`<workdir>/slurm/submitted.json`: Slurm array tasks submitted and not yet collected.

    Several matrix processes may share a workdir: every change holds an exclusive lock and
    rewrites the file atomically.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock_path = path.with_name(path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as e:
            raise BackendError(f"{self.path} is not readable ({e}): move it away to forget what earlier "
                               "runs submitted (their jobs are then not collected)") from e
        if not isinstance(data, dict) or data.get("schema") != STATE_SCHEMA:
            raise BackendError(f"{self.path} has schema {data.get('schema') if isinstance(data, dict) else '?'}"
                               f", this matrix reads {STATE_SCHEMA}: collect with the matrix version that "
                               "wrote it, or move the file away")
        return dict(data.get("tasks") or {})

    def _write(self, tasks: dict[str, dict[str, Any]]) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"schema": STATE_SCHEMA, "tasks": tasks}, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def load(self) -> dict[str, dict[str, Any]]:
        with self._locked():
            return self._read()

    def add(self, records: dict[str, dict[str, Any]]) -> None:
        with self._locked():
            tasks = self._read()
            tasks.update(records)
            self._write(tasks)

    def remove(self, keys: Sequence[str]) -> None:
        if not keys:
            return
        with self._locked():
            tasks = self._read()
            for key in keys:
                tasks.pop(key, None)
            self._write(tasks)


@dataclass
class Watched:
    """A submitted array task the controller waits for."""

    task: Task
    key: str
    job: str
    index: int
    results_dir: Path
    submitted_at: float
    run_id: str
    started: bool = False
    finished_seen: float | None = None

    @property
    def job_id(self) -> str:
        return f"{self.job}_{self.index}"

    @classmethod
    def from_record(cls, task: Task, key: str, rec: dict[str, Any]) -> Watched:
        return cls(task, key, str(rec["job"]), int(rec["index"]), Path(rec["results_dir"]),
                   float(rec["submitted_at"]), str(rec.get("run_id", "")))

    def record(self) -> dict[str, Any]:
        return {"job": self.job, "index": self.index, "task": self.task.id,
                "results_dir": str(self.results_dir), "submitted_at": self.submitted_at,
                "run_id": self.run_id}


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return ""


# ---------------------------------------------------------------------------------- the backend

@register
class SlurmBackend(Backend):
    kind = "slurm"
    config = SlurmEnvironment
    queued = True
    env: SlurmEnvironment

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        super().__init__(env, ctx)
        workdir = ctx.workdir.expanduser().resolve()
        base = Path(self.env.results_dir).expanduser().resolve() if self.env.results_dir else workdir / "slurm"
        self.results_dir = base / ctx.run_id
        self.state = SubmittedState(workdir / "slurm" / "submitted.json")
        self._sacct_failing_since: float | None = None
        self._reported: set[str] = set()  # state keys reported by this instance

    def __enter__(self) -> SlurmBackend:
        for command in ["sacct"] + (["sbatch"] if self.ctx.submit else []):
            if shutil.which(command) is None:
                raise BackendError(f"environment {self.env.name!r}: `{command}` is not on PATH. Run matrix "
                                   "on a Slurm login node (or install slurm-client); `make services` starts "
                                   "a one-node Slurm here")
        return self

    # -- the flow --------------------------------------------------------------------------------

    def run(self, tasks: Sequence[Task], sink: Sink) -> None:
        """Collect what earlier runs submitted, submit what is missing, then poll until all is in.

        ctx.submit False (`matrix collect`): one look, nothing submitted, nothing waited for.
        ctx.wait False (`--no-wait`): one look at earlier jobs, submit, return.
        """
        watch: dict[str, Watched] = {}
        try:
            records = self.state.load()
            for task in tasks:
                key = state_key(task)
                if key in records:
                    watch[key] = Watched.from_record(task, key, records[key])
            trouble = self._poll(watch, sink, first=True) if watch else self._accounting_trouble()
            missing = [t for t in tasks if state_key(t) not in watch and state_key(t) not in self._reported]
            if not self.ctx.submit:
                if missing:
                    self._say(f"{len(missing)} tasks were never submitted, or Slurm does not know their jobs: "
                              "`matrix run` submits them")
                return
            if trouble:
                # Without accounting, timeouts and cancels would go unseen: submit nothing new.
                self._fail(missing, f"not submitted: {trouble}", sink)
                missing = []
            self._submit(missing, watch, sink)
            if not self.ctx.wait:
                if watch and self.ctx.back_later:
                    jobs = ", ".join(sorted({w.job for w in watch.values()}, key=int))
                    self._say(f"{len(watch)} tasks queued or running as Slurm jobs {jobs}; this run gathers "
                              "them before it ends")
                elif watch:
                    self._say(self._how_to_collect(watch))
                return
            while watch:
                if self.ctx.stop.wait(self.env.poll_interval):
                    self._interrupted(watch, sink)
                    return
                self._poll(watch, sink)
        except KeyboardInterrupt:
            self._interrupted(watch, sink)
            raise

    def elsewhere(self) -> bool:
        """True when this host is not one of the nodes the environment's jobs can land on (sinfo -N)."""
        args = ["sinfo", "-h", "-N", "-o", "%N"] + (["-p", self.env.partition] if self.env.partition else [])
        try:
            nodes = set(_slurm(args, timeout=SACCT_TIMEOUT_S).stdout.split())
        except BackendError:
            return False  # cannot tell: do not overlap
        host = socket.gethostname()
        return bool(nodes) and not ({host, host.split(".")[0]} & nodes)

    def _accounting_trouble(self) -> str | None:
        """Why sacct cannot be used, or None: without it matrix could not see jobs time out or end."""
        try:
            _slurm(["sacct", "-n", "-X", "-S", "now", "-E", "now", "--format=JobID"], timeout=SACCT_TIMEOUT_S)
        except BackendError as e:
            return f"Slurm accounting does not answer ({e})"
        return None

    def _say(self, text: str) -> None:
        print(f"slurm ({self.env.name}): {text}", file=sys.stderr, flush=True)

    def _how_to_collect(self, watch: dict[str, Watched]) -> str:
        jobs = ", ".join(sorted({w.job for w in watch.values()}, key=int))
        return (f"{len(watch)} tasks are queued or running as Slurm jobs {jobs}; `matrix collect` "
                "(or `matrix run` again, with the same -m, --db and --workdir) gathers their results")

    # -- submission ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("logs", "work", "out"):
            (self.results_dir / sub).mkdir(parents=True, exist_ok=True)
        # Workers run exactly the controller's bench.py.
        tmp = self.results_dir / f".bench.py.{os.getpid()}.tmp"
        shutil.copyfile(BENCH_PATH, tmp)
        os.replace(tmp, self.results_dir / "bench.py")

    def _submit(self, tasks: Sequence[Task], watch: dict[str, Watched], sink: Sink) -> None:
        """One sbatch per node shape (and per max_array_size tasks): a job array."""
        if not tasks:
            return
        self._prepare()
        shapes: dict[tuple[int, int], list[Task]] = {}
        for task in tasks:
            shapes.setdefault((task.cell.gpus, task.cell.nodes), []).append(task)
        broken: str | None = None  # Slurm cannot take jobs at all: the rest fails without more tries
        for (gpus, nodes), group in shapes.items():
            size = self.env.max_array_size
            for start in range(0, len(group), size):
                if self.ctx.stop.is_set():
                    return
                chunk = group[start:start + size]
                if broken:
                    self._fail(chunk, broken, sink)
                else:
                    broken = self._submit_array(chunk, gpus, nodes, watch, sink)

    def _fail(self, tasks: Sequence[Task], reason: str, sink: Sink, extra: dict[str, Any] | None = None) -> None:
        now = time.time()
        for task in tasks:
            sink(task, Outcome(Status.FAILED, reason=reason, started_at=now, finished_at=now,
                               extra={"backend": "slurm", **(extra or {})}))
            self._reported.add(state_key(task))

    def _next_name(self) -> str:
        n = 1
        while (self.results_dir / f"job-{n:03d}.sh").exists():
            n += 1
        return f"{n:03d}"

    def _submit_array(self, tasks: Sequence[Task], gpus: int, nodes: int, watch: dict[str, Watched],
                      sink: Sink) -> str | None:
        """sbatch one array; returns why Slurm takes no jobs at all (unreachable), else None."""
        now = time.time()
        lines: list[str] = []
        runnable: list[Task] = []
        ids = {t.id for t in tasks}
        for sub in ("out", "work"):  # files an earlier attempt of these tasks left in a reused results_dir
            for name in os.listdir(self.results_dir / sub):
                if name.split(".", 1)[0] in ids:
                    (self.results_dir / sub / name).unlink(missing_ok=True)
        for task in tasks:
            args = task.cell.bench_args()
            bad = [a for a in args if not a or "\t" in a or any(c in a for c in _CONTROL)]
            if bad or not _TASK_ID_RE.match(task.id):
                self._fail([task], f"bench argument {bad[0] if bad else task.id!r} is empty or has a tab or "
                           "newline: the slurm manifest cannot carry it", sink)
                continue
            lines.append("\t".join([task.id, *args]))
            runnable.append(task)
        if not runnable:
            return None
        name = self._next_name()
        manifest = f"manifest-{name}.tsv"
        script = self.results_dir / f"job-{name}.sh"
        (self.results_dir / manifest).write_text("\n".join(lines) + "\n")
        limit = time_limit(self.env, max(t.cell.run.timeout for t in runnable))
        text = render_script(array_job(self.env, count=len(runnable), gpus=gpus, nodes=nodes, time=limit,
                                       run_id=self.ctx.run_id, results_dir=self.results_dir,
                                       manifest=manifest))
        script.write_text(text)
        try:
            proc = _slurm(["sbatch", "--parsable", str(script)], timeout=SBATCH_TIMEOUT_S)
        except SlurmError as e:
            if e.unreachable:
                self._fail(runnable, str(e), sink, {"slurm_script": str(script)})
                return str(e)
            self._fail(runnable, f"sbatch refused the job: {e.detail}", sink, {"slurm_script": str(script)})
            return None
        except BackendError as e:  # sbatch timed out: the job may exist; its tasks are not watched
            self._fail(runnable, f"{e} (if the job was queued after all, scancel it: {script})", sink,
                       {"slurm_script": str(script)})
            return str(e)
        job = proc.stdout.strip().split(";")[0]
        if not _JOB_ID_RE.match(job):
            raise BackendError(f"sbatch --parsable printed {proc.stdout.strip()!r}, not a job id")
        new = {state_key(t): Watched(t, state_key(t), job, i, self.results_dir, now, self.ctx.run_id)
               for i, t in enumerate(runnable)}
        self.state.add({k: w.record() for k, w in new.items()})
        watch.update(new)
        if self.ctx.verbose:
            self._say(f"submitted job {job}: {len(runnable)} tasks, {nodes} node(s) x {gpus} "
                      f"process(es), time limit {limit} ({script})")
        return None

    # -- polling ---------------------------------------------------------------------------------

    def _poll(self, watch: dict[str, Watched], sink: Sink, first: bool = False) -> str | None:
        """One sacct call and one directory listing per results dir: report what is over.

        Returns what went wrong with sacct, if it did: result files are still collected then.

        A task that neither sacct nor squeue knows long after its submission is lost: on the
        first look at an earlier run's jobs it is forgotten (so that `matrix run` submits it
        again); a job this run submitted and Slurm lost is a failed repeat.
        """
        trouble = None
        try:
            rows = sacct(sorted({w.job for w in watch.values()}, key=int))
            self._sacct_failing_since = None
        except BackendError as e:
            # Results still come as files; sacct is needed only for timeouts, cancels and failures.
            trouble = f"Slurm accounting does not answer ({e})"
            if self._sacct_failing_since is None:
                self._sacct_failing_since = time.time()
                self._say(f"sacct failed ({e}); still collecting result files" + ("" if first else ", and retrying"))
            rows = {}
        listings: dict[Path, set[str]] = {}
        for d in {w.results_dir for w in watch.values()}:
            try:
                listings[d] = set(os.listdir(d / "out"))
            except OSError:
                listings[d] = set()
        now = time.time()
        finished: list[tuple[Watched, Outcome]] = []
        lost: list[str] = []
        suspects: list[Watched] = []
        for w in watch.values():
            row = rows.get((w.job, w.index))
            if row is not None and row.state in STARTED_STATES:
                self._started(w)
            if f"{w.task.id}.done" in listings[w.results_dir]:
                finished.append((w, self._from_files(w, row)))
            elif row is not None and row.state in FINISHED_STATES:
                if row.state in ("COMPLETED", "FAILED"):
                    # The result may not be visible yet on a network filesystem.
                    w.finished_seen = w.finished_seen or now
                    if now - w.finished_seen < RESULT_GRACE_S and self._sacct_failing_since is None:
                        continue
                finished.append((w, self._from_state(w, row)))
            elif row is None and not rows and self._sacct_failing_since is not None:
                continue
            elif row is None and now - w.submitted_at > LOST_AFTER_S and not self._array_known(rows, w.job):
                suspects.append(w)
        if suspects:
            # Accounting can lag far behind under load: ask the controller before calling a job lost.
            queued = self._queued()
            for w in suspects:
                if queued is None or w.job in queued:
                    continue
                if first:
                    lost.append(w.key)
                else:
                    finished.append((w, Outcome(
                        Status.FAILED, None, self._job_log(w), f"Slurm lost job {w.job_id}: neither "
                        f"accounting (sacct) nor the controller (squeue) knows it {now - w.submitted_at:.0f} s "
                        "after its submission", w.submitted_at, now, self._extra(w, None))))
        reported: list[str] = []
        try:
            for w, outcome in finished:
                self._started(w)
                sink(w.task, outcome)
                reported.append(w.key)
                self._reported.add(w.key)
        finally:
            for key in reported:
                watch.pop(key, None)
            for key in lost:
                watch.pop(key, None)
            self.state.remove(reported + lost)
        return trouble

    @staticmethod
    def _queued() -> set[str] | None:
        """Array job ids the controller still holds for this user; None when it does not answer."""
        try:
            proc = _slurm(["squeue", "-h", "--me", "-o", "%F"], timeout=SACCT_TIMEOUT_S)
        except BackendError:
            return None
        return set(proc.stdout.split())

    @staticmethod
    def _array_known(rows: dict[tuple[str, int], SacctRow], job: str) -> bool:
        return any(k[0] == job for k in rows)

    def _started(self, w: Watched) -> None:
        if not w.started:
            w.started = True
            if self.ctx.on_start:
                self.ctx.on_start(w.task)

    def _extra(self, w: Watched, row: SacctRow | None) -> dict[str, Any]:
        extra: dict[str, Any] = {"backend": "slurm", "slurm_job_id": w.job_id,
                                 "python_executable": self.env.python or "python3",
                                 "slurm_results_dir": str(w.results_dir)}
        if row is not None:
            extra.update(slurm_state=row.state, slurm_nodes=row.nodes, slurm_elapsed=row.elapsed)
        if self.env.partition:
            extra["slurm_partition"] = self.env.partition
        if self.env.container:
            extra["container"] = self.env.container
        if w.run_id and w.run_id != self.ctx.run_id:
            extra["submitted_by_run"] = w.run_id
        return extra

    def _job_log(self, w: Watched) -> str:
        """What the batch script itself printed (setup lines, srun, slurmstepd's kill notices)."""
        text = _read(w.results_dir / "logs" / f"{w.job}_{w.index}.out").strip()
        return f"\n--- slurm job {w.job_id} ---\n{tail(text, 1500)}" if text else ""

    def _from_files(self, w: Watched, row: SacctRow | None) -> Outcome:
        out_dir = w.results_dir / "out"
        try:
            done = json.loads(_read(out_dir / f"{w.task.id}.done"))
            rc, srun_rc = int(done["returncode"]), int(done["srun_returncode"])
            started, finished = float(done["started_at"]), float(done["finished_at"])
        except (ValueError, KeyError, TypeError) as e:
            now = time.time()
            return Outcome(Status.FAILED, None, self._job_log(w), f"unreadable result marker {w.task.id}.done: {e}",
                           now, now, self._extra(w, row))
        stdout = _read(out_dir / f"{w.task.id}.out")
        log = _read(out_dir / f"{w.task.id}.err") + self._job_log(w)
        outcome = outcome_from_process(stdout, log, rc, started, finished, self._extra(w, row))
        if outcome.status is Status.OK and srun_rc != 0:
            return Outcome(Status.FAILED, outcome.result, outcome.log_tail,
                           f"a rank exited with status {srun_rc} (srun)", started, finished, outcome.extra)
        return outcome

    def _from_state(self, w: Watched, row: SacctRow) -> Outcome:
        """A task that ended without writing its result: the Slurm state says why."""
        work = w.results_dir / "work"
        log = _read(work / f"{w.task.id}.rank0.log")
        for other in sorted(work.glob(f"{w.task.id}.rank*.log")):
            if other.name != f"{w.task.id}.rank0.log":
                log += f"\n--- {other.name} ---\n{tail(_read(other), 1500)}"
        log += self._job_log(w)
        started = row.start or w.submitted_at
        finished = row.end or time.time()
        extra = self._extra(w, row)
        job = f"Slurm job {w.job_id}"
        if row.state in ("TIMEOUT", "DEADLINE"):
            limit = self.env.time or "the run's timeout"
            return Outcome(Status.TIMEOUT, None, tail(log), f"{job} exceeded its time limit ({limit}) "
                           "and was killed", started, finished, extra)
        if row.state == "OUT_OF_MEMORY":
            return Outcome(Status.OOM, None, tail(log), f"{job} ran out of host memory (OUT_OF_MEMORY"
                           + (f"; mem: {self.env.mem}" if self.env.mem else "") + ")", started, finished, extra)
        if row.state in ("CANCELLED", "REVOKED"):
            return Outcome(Status.CANCELLED, None, tail(log), f"{job} was cancelled", started, finished, extra)
        if row.state == "PREEMPTED":
            # cancelled, not failed: resume runs a cancelled repeat again by default.
            return Outcome(Status.CANCELLED, None, tail(log), f"{job} was preempted (runs again on resume)",
                           started, finished, extra)
        if row.state in ("NODE_FAIL", "BOOT_FAIL"):
            # The node died under the job (or never booted): nothing is wrong with the cell, so, as for
            # a preemption, resume runs it again.
            return Outcome(Status.CANCELLED, None, tail(log), f"{job}: {row.state}, a node of the job "
                           f"({row.nodes}) failed (runs again on resume)", started, finished, extra)
        stdout = _read(work / f"{w.task.id}.rank0.out")
        outcome = outcome_from_process(stdout, log, row.exit_code, started, finished, extra)
        if row.state == "COMPLETED" and outcome.result is None:
            return Outcome(Status.FAILED, None, outcome.log_tail, f"{job} completed but its result file did "
                           f"not appear in {w.results_dir / 'out'}: is results_dir on a filesystem that "
                           "the compute nodes share?", started, finished, extra)
        if outcome.result is None and outcome.status is Status.FAILED:
            reason = outcome.reason or f"exit status {row.exit_code}"
            return Outcome(Status.FAILED, None, outcome.log_tail, f"{job} {row.state}: {reason}",
                           started, finished, extra)
        return outcome

    # -- Ctrl-C ----------------------------------------------------------------------------------

    def _interrupted(self, watch: dict[str, Watched], sink: Sink) -> None:
        """Offer to scancel what is still queued or running; by default it keeps running."""
        if not watch:
            return
        if sys.stdin is not None and sys.stdin.isatty():
            jobs = ", ".join(sorted({w.job for w in watch.values()}, key=int))
            print(f"\n{len(watch)} Slurm tasks of environment {self.env.name!r} are not finished "
                  f"(jobs {jobs}). Cancel them with scancel? (y/N) ", end="", file=sys.stderr, flush=True)
            try:
                answer = sys.stdin.readline().strip().lower()
            except (KeyboardInterrupt, EOFError):
                answer = ""
            if answer in ("y", "yes"):
                self._cancel(watch, sink)
                return
        self._say("interrupted: " + self._how_to_collect(watch))

    def _cancel(self, watch: dict[str, Watched], sink: Sink) -> None:
        by_job: dict[str, list[int]] = {}
        for w in watch.values():
            by_job.setdefault(w.job, []).append(w.index)
        ids = [f"{job}_[{','.join(str(i) for i in sorted(idx))}]" for job, idx in by_job.items()]
        _slurm(["scancel", *ids])
        now = time.time()
        reported = []
        try:
            for key, w in list(watch.items()):
                sink(w.task, Outcome(Status.CANCELLED, None, "", f"cancelled with scancel (Slurm job {w.job_id})",
                                     w.submitted_at, now, self._extra(w, None)))
                reported.append(key)
                watch.pop(key)
        finally:
            self.state.remove(reported)
        self._say(f"cancelled {len(reported)} tasks ({', '.join(ids)})")

    # -- host ------------------------------------------------------------------------------------

    @classmethod
    def doctor(cls) -> list[Check]:
        if not any(shutil.which(c) for c in ("sbatch", "sinfo", "sacct")):
            return [Check("slurm client", None, "sbatch/sinfo/sacct not on PATH: no Slurm here "
                          "(needed only for slurm environments; `make services` starts a one-node Slurm)")]
        checks = [Check(c, bool(shutil.which(c)), shutil.which(c) or "not on PATH: install slurm-client")
                  for c in ("sbatch", "sacct")]
        for name, args, what in (
            ("sinfo", ["sinfo", "-h", "-o", "%P %a %D %t"], "partitions"),
            ("accounting (sacct)", ["sacct", "-n", "-X", "-S", "now", "-E", "now", "--format=JobID"], ""),
        ):
            try:
                proc = _slurm(args, timeout=20)
                detail = "; ".join(ln.strip() for ln in proc.stdout.splitlines()[:6] if ln.strip())
                checks.append(Check(name, True, f"{what}: {detail}" if what else "answers"))
            except BackendError as e:
                checks.append(Check(name, False, str(e)))
        return checks

    @classmethod
    def clean(cls, run_id: str | None = None) -> list[str]:
        """scancel the jobs of one run (found by their comment); without a run id nothing is touched,
        since jobs left running on purpose are collected later."""
        if not run_id or shutil.which("squeue") is None:
            return []
        try:
            proc = _slurm(["squeue", "-h", "--me", "-o", "%F|%k"], timeout=30)
        except BackendError:
            return []
        jobs = sorted({line.split("|", 1)[0] for line in proc.stdout.splitlines()
                       if line.split("|", 1)[-1] == f"matrix run {run_id}"})
        if not jobs:
            return []
        _slurm(["scancel", *jobs])
        return [f"slurm job {job} (run {run_id})" for job in jobs]
