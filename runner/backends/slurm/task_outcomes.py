"""A finished array task's outcome: from the files its batch script published, else from the
state Slurm gives the job (timeout, out of memory, cancelled, node failure)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from runner.backends import containers, ranks
from runner.backends.containers import facts
from runner.backends.slurm.commands import SacctRow
from runner.backends.slurm.config import SlurmEnvironment
from runner.backends.slurm.state import Watched
from runner.domain.outcomes import Outcome, Status, outcome_from_process, tail


def extra(env: SlurmEnvironment, run_id: str, w: Watched, row: SacctRow | None) -> dict[str, Any]:
    """What every stored outcome of this task says about where and how Slurm ran it."""
    out: dict[str, Any] = {"backend": "slurm", "slurm_job_id": w.job_id,
                           "python_executable": env.python or "python3", "slurm_results_dir": str(w.results_dir)}
    if row is not None:
        out.update(slurm_state=row.state, slurm_nodes=row.nodes, slurm_elapsed=row.elapsed)
    if env.partition:
        out["slurm_partition"] = env.partition
    if env.container:
        # The runtime and the image as the job's per-node check found them (version, image id or hash).
        out.update(facts.extra(containers.runtime(env.container), facts.read(runtime_file(w))))
    if w.run_id and w.run_id != run_id:
        out["submitted_by_run"] = w.run_id
    return out


def runtime_file(w: Watched) -> Path:
    """What the container runtime's check recorded on each node of the task's job."""
    return w.results_dir / "out" / f"{w.task.id}.runtime"


def job_log(w: Watched) -> str:
    """What the batch script itself printed (setup lines, srun, slurmstepd's kill notices)."""
    text = ranks.read_text(w.results_dir / "logs" / f"{w.job}_{w.index}.out").strip()
    return f"\n--- slurm job {w.job_id} ---\n{tail(text, 1500)}" if text else ""


def from_files(w: Watched, row: SacctRow | None, facts: dict[str, Any]) -> Outcome:
    """The task published its result: the benchmark's status, unless srun says a rank failed."""
    out_dir = w.results_dir / "out"
    try:
        done = json.loads(ranks.read_text(out_dir / f"{w.task.id}.done"))
        rc, srun_rc = int(done["returncode"]), int(done["srun_returncode"])
        check_rc = int(done.get("check_returncode", 0))
        started, finished = float(done["started_at"]), float(done["finished_at"])
    except (ValueError, KeyError, TypeError) as e:
        now = time.time()
        return Outcome(Status.FAILED, None, job_log(w), f"unreadable result marker {w.task.id}.done: {e}",
                       now, now, facts)
    if check_rc != 0:
        return not_started_by_check(w, check_rc, started, finished, facts)
    stdout = ranks.read_text(out_dir / f"{w.task.id}.out")
    log = ranks.read_text(out_dir / f"{w.task.id}.err") + job_log(w)
    outcome = outcome_from_process(stdout, log, rc, started, finished, facts)
    if outcome.status is Status.OK and srun_rc != 0:
        return replace(outcome, status=Status.FAILED, reason=f"a rank exited with status {srun_rc} (srun)")
    return outcome


def not_started_by_check(w: Watched, check_rc: int, started: float, finished: float,
                         facts_: dict[str, Any]) -> Outcome:
    """The container runtime's check failed on a node: nothing ran, so the task is not_started."""
    why = facts.errors(facts.read(runtime_file(w)))
    reason = ("the container runtime cannot start on " + "; ".join(why) if why else
              f"the container runtime's check did not complete on every node of Slurm job {w.job_id} "
              f"(srun exit status {check_rc}); see the job's log")
    return Outcome(Status.NOT_STARTED, None, tail(job_log(w).strip()), reason, started, finished, facts_)


# Slurm states that decide the outcome by themselves, whatever the task printed.
_BY_STATE = {
    "TIMEOUT": (Status.TIMEOUT, "exceeded its time limit ({limit}) and was killed"),
    "DEADLINE": (Status.TIMEOUT, "exceeded its time limit ({limit}) and was killed"),
    "OUT_OF_MEMORY": (Status.OOM, "ran out of host memory (OUT_OF_MEMORY{mem})"),
    "CANCELLED": (Status.CANCELLED, "was cancelled"),
    "REVOKED": (Status.CANCELLED, "was cancelled"),
    # cancelled, not failed: resume runs a cancelled repeat again by default.
    "PREEMPTED": (Status.CANCELLED, "was preempted (runs again on resume)"),
    # A node of the job died (or never booted): nothing is wrong with the cell, so, as for a
    # preemption, resume runs it again.
    "NODE_FAIL": (Status.CANCELLED, "NODE_FAIL, a node of the job failed (runs again on resume)"),
    "BOOT_FAIL": (Status.CANCELLED, "BOOT_FAIL, a node of the job failed to boot (runs again on resume)"),
}


def decided_by_state(state: str) -> bool:
    """Whether this Slurm state alone says how a task ended (a time limit, a cancel, a lost node)."""
    return state in _BY_STATE


def from_state(env: SlurmEnvironment, w: Watched, row: SacctRow, facts: dict[str, Any]) -> Outcome:
    """A task that ended without publishing its result: the Slurm state says why."""
    stdout, log = ranks.read_ranks(w.results_dir / "work" / w.task.id)
    log += job_log(w)
    started = row.start or w.submitted_at
    finished = row.end or time.time()
    job = f"Slurm job {w.job_id}"
    if row.state in _BY_STATE:
        status, words = _BY_STATE[row.state]
        sep = ":" if row.state in ("NODE_FAIL", "BOOT_FAIL") else ""
        reason = f"{job}{sep} " + words.format(limit=env.time or "the run's timeout",
                                               mem=f"; mem: {env.mem}" if env.mem else "")
        return Outcome(status, None, tail(log), reason, started, finished, facts)
    outcome = outcome_from_process(stdout, log, row.exit_code, started, finished, facts)
    if row.state == "COMPLETED" and outcome.result is None:
        return replace(outcome, status=Status.FAILED, reason=(
            f"{job} completed but its result file did not appear in {w.results_dir / 'out'}: is results_dir "
            "on a filesystem that the compute nodes share?"))
    if outcome.result is None and outcome.status is Status.FAILED:
        return replace(outcome, reason=f"{job} {row.state}: {outcome.reason or f'exit status {row.exit_code}'}")
    return outcome
