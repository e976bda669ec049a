"""Every Slurm command matrix runs goes through `slurm` (an argument list, never a shell):
sbatch (retried while the controller is briefly unreachable), sacct (one call polls every job),
squeue (why a job pends), scancel and sinfo."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from runner.base.errors import BackendError

SACCT_FORMAT = "JobID,State,ExitCode,Elapsed,Start,End,NodeList"
SBATCH_TIMEOUT_S = 120.0
SACCT_TIMEOUT_S = 120.0
# Times as epoch seconds, which carry no time zone to get wrong; TZ=UTC makes the ISO fallback (a
# Slurm that ignores SLURM_TIME_FORMAT) unambiguous too.
SACCT_ENV = {"SLURM_TIME_FORMAT": "%s", "TZ": "UTC"}
JOB_ID_RE = re.compile(r"^\d+$")


# What sbatch says when the controller is only briefly out of reach (restarting, overloaded): such a
# refusal is tried again with backoff; any other refusal is final.
TRANSIENT = ("unable to contact slurm controller", "socket timed out", "connection refused", "try again",
             "temporarily unavailable", "temporarily unable", "zero bytes were transmitted",
             "resource temporarily", "slurm_persist_conn_open")
SBATCH_TRIES = 5
SBATCH_BACKOFF_S = 2.0  # the first wait; each next one doubles (2, 4, 8, 16 s)


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
        self.transient = any(t in low for t in TRANSIENT)
        super().__init__(f"`{args[0]}` failed: {self.detail}{hint}")


def slurm(args: list[str], *, timeout: float = 60.0, check: bool = True,
          env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run one Slurm command: an argument list (never a shell), a timeout and errors that say what to do.
    `env` adds variables to this process's environment for the command."""
    exe = shutil.which(args[0])
    if exe is None:
        raise BackendError(f"`{args[0]}` is not on PATH: run matrix where the Slurm client commands are "
                           "(a login node), or install slurm-client; `make services` starts a one-node "
                           "Slurm on this machine")
    try:
        proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as e:
        raise BackendError(f"`{args[0]}` did not answer within {timeout:g} s: is the Slurm controller "
                           "reachable? (`scontrol ping`)") from e
    except OSError as e:
        raise BackendError(f"cannot run `{args[0]}`: {e}") from e
    if check and proc.returncode != 0:
        raise SlurmError(args, proc.returncode, proc.stderr or proc.stdout)
    return proc


def sbatch(script: Path, say: Callable[[str], None] | None = None) -> str:
    """Submit a batch script; the job id. A transient refusal is tried again, SBATCH_TRIES times in
    all with doubling waits; a final refusal, or the last transient one, raises SlurmError."""
    for attempt in range(SBATCH_TRIES):
        try:
            proc = slurm(["sbatch", "--parsable", str(script)], timeout=SBATCH_TIMEOUT_S)
        except SlurmError as e:
            if not e.transient or attempt == SBATCH_TRIES - 1:
                raise
            delay = SBATCH_BACKOFF_S * 2 ** attempt
            if say:
                say(f"sbatch: {e.detail}; trying again in {delay:g} s ({attempt + 2}/{SBATCH_TRIES})")
            time.sleep(delay)
            continue
        job = proc.stdout.strip().split(";")[0]
        if not JOB_ID_RE.match(job):
            raise BackendError(f"sbatch --parsable printed {proc.stdout.strip()!r}, not a job id")
        return job
    raise AssertionError("unreachable")


def scancel(ids: Sequence[str]) -> None:
    if ids:
        slurm(["scancel", *ids])


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
    """A time as sacct prints it under SACCT_ENV: epoch seconds; else ISO 8601 in UTC (TZ=UTC)."""
    text = text.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None  # Unknown, None: the task has not started or ended
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


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
    proc = slurm(["sacct", "-P", "-n", "-X", "-j", ",".join(jobs), f"--format={SACCT_FORMAT}"],
                 timeout=SACCT_TIMEOUT_S, env=SACCT_ENV)
    return parse_sacct(proc.stdout)



def accounting_trouble() -> str | None:
    """Why sacct cannot be used, or None: without it matrix could not see jobs time out or end."""
    try:
        slurm(["sacct", "-n", "-X", "-S", "now", "-E", "now", "--format=JobID"], timeout=SACCT_TIMEOUT_S)
    except BackendError as e:
        return f"Slurm accounting does not answer ({e})"
    return None


def queued_jobs() -> set[str] | None:
    """Array job ids the controller still holds for this user; None when it does not answer."""
    try:
        proc = slurm(["squeue", "-h", "--me", "-o", "%F"], timeout=SACCT_TIMEOUT_S)
    except BackendError:
        return None
    return set(proc.stdout.split())


@dataclass(frozen=True)
class PendingTask:
    """One pending array task as squeue sees it."""

    job: str
    index: int
    reason: str       # the reason code, e.g. Resources, PartitionDown, ReqNodeNotAvail
    detail: str       # what follows the code, e.g. "UnavailableNodes:n[1-2]"
    partition: str


def pending(jobs: Sequence[str]) -> dict[tuple[str, int], PendingTask]:
    """Why each pending array task of these jobs waits (squeue -r: one line per array task)."""
    if not jobs:
        return {}
    proc = slurm(["squeue", "-h", "-r", "-t", "PENDING", "-j", ",".join(jobs), "-o", "%i|%r|%P"],
                 timeout=SACCT_TIMEOUT_S)
    found: dict[tuple[str, int], PendingTask] = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 3:
            continue
        job, sep, index = parts[0].partition("_")
        reason, _, detail = parts[1].strip().strip("()").partition(",")
        for i in [int(index)] if index.isdigit() else _indices(index):
            found[(job, i)] = PendingTask(job, i, reason.strip(), detail.strip(), parts[2].strip())
    return found


def node_states(partition: str | None) -> dict[str, str] | None:
    """The state of every node of a partition (sinfo -N), lower case without flags; None when sinfo fails."""
    args = ["sinfo", "-h", "-N", "-o", "%N|%t"] + (["-p", partition] if partition else [])
    try:
        proc = slurm(args, timeout=SACCT_TIMEOUT_S)
    except BackendError:
        return None
    states = {}
    for line in proc.stdout.splitlines():
        node, _, state = line.strip().partition("|")
        if node:
            states[node] = state.strip().rstrip("*~#!%$@^-").lower()
    return states


def nodes_of(partition: str | None) -> set[str] | None:
    """The nodes a partition's jobs can land on; None when sinfo fails."""
    states = node_states(partition)
    return None if states is None else set(states)
