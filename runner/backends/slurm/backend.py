"""The slurm backend: job arrays on an existing Slurm cluster, results as files on a shared directory.

matrix adds no scheduler: each environment and node shape (gpus, nodes) becomes one `sbatch`
of a rendered script (`script`), a job array with one task per repeat. The array index picks a
line of a manifest in the results directory, so the script does not grow with the matrix.
Workers write their output as files (tmp + mv); only the controller reads them (`task_outcomes`) and
reports outcomes (the sink writes the database). One `sacct -P` call per poll interval covers
every job of the run; pending jobs are asked why they wait (`pending`).

What was submitted is kept in the result store until it is collected (`state`), so a later
`matrix run` or `matrix collect` with the same --db picks up jobs that an earlier, interrupted or
`--no-wait` run left running, and submits only what is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from runner.backends import artifact, containers, register
from runner.backends.base import NotStarted, Sink, not_started
from runner.backends.batch import BatchBackend, Polled
from runner.backends.containers import ImageIdentity
from runner.backends.containers.image_hash import image_identity
from runner.backends.context import RunContext
from runner.backends.slurm import commands, host, pending, task_outcomes
from runner.backends.slurm.commands import SacctRow, SlurmError
from runner.backends.slurm.config import CONTROL, TASK_ID_RE, SlurmEnvironment
from runner.backends.slurm.script import array_job, container_launch, render_script, results_seen, time_limit
from runner.backends.slurm.state import SlurmJobs, Watched, state_key
from runner.backends.workloads import Changed, arguments
from runner.backends.workloads.files import stage
from runner.base import safewrite
from runner.base.errors import BackendError
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status

# sacct lags behind the files: a job sacct calls finished may not show its result file yet on a
# network filesystem; and a job sacct does not know at all is lost only after a while.
RESULT_GRACE_S = 30.0
# A job that ended this long ago by sacct's End is decided at once, without a wait of its own: a network
# filesystem shows a file within its attribute cache's time (NFS: acdirmax, 60 s by default), and `matrix collect`
# run again and again, each run shorter than the wait, must still gather a job that never published. Twice the
# cache's time, so that a controller's clock a little behind this host's does not cut the wait short.
LONG_OVER_S = 120.0
LOST_AFTER_S = 300.0

# States in which a job is over (sacct(1), "JOB STATE CODES"); all others are waited on.
FINISHED_STATES = frozenset({
    "COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "NODE_FAIL", "PREEMPTED",
    "BOOT_FAIL", "DEADLINE", "REVOKED",
})
STARTED_STATES = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STAGE_OUT", "SIGNALING"})


@register
class SlurmBackend(BatchBackend):
    kind = "slurm"
    scheduler = "Slurm"
    cancel_tool = "scancel"
    config = SlurmEnvironment
    doctor = staticmethod(host.doctor)
    probes = "sbatch, sinfo, sacct, the container runtimes (Apptainer, Podman, Charliecloud, Pyxis)"
    clean = staticmethod(host.clean)
    env: SlurmEnvironment

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        super().__init__(env, ctx)
        self.workdir = ctx.workdir.expanduser().resolve()
        base = Path(self.env.results_dir).expanduser().resolve() if self.env.results_dir else self.workdir / "slurm"
        self.results_dir = base / ctx.run_id
        self.state: SlurmJobs = SlurmJobs(ctx.store)
        self.poll_interval = self.env.poll_interval
        self._sacct_failing_since: float | None = None
        self._outcomes: dict[str, Outcome] = {}  # what `poll` found, by state key, until `collect` takes it
        self._identity: ImageIdentity | None = None  # of a file or directory image, taken once per session

    def __enter__(self) -> SlurmBackend:
        for command in ["sacct"] + (["sbatch"] if self.ctx.submit else []):
            if shutil.which(command) is None:
                raise NotStarted(f"environment {self.env.name!r}: `{command}` is not on PATH. Run matrix "
                                 "on a Slurm login node (or install slurm-client); `make services` starts "
                                 "a one-node Slurm here")
        container = container_launch(self.env, gpus=0, run_id=self.ctx.run_id, results_dir=self.results_dir,
                                     time_s=None)
        if container is not None:
            problems = container[0].launch_problems(container[1])
            if problems:
                raise NotStarted(f"environment {self.env.name!r}: " + "; ".join(problems))
        if self.ctx.store is not None:
            legacy = self.workdir / "slurm" / "submitted.json"
            if legacy.exists() and self.state.import_legacy(legacy):
                self._say(f"moved the jobs listed in {legacy} into the result store {self.ctx.store.path}")
        return self

    def elsewhere(self) -> bool:
        """True when this host is not one of the nodes the environment's jobs can land on (sinfo -N)."""
        nodes = commands.nodes_of(self.env.partition)
        if nodes is None:
            return False  # cannot tell: do not overlap
        host_name = socket.gethostname()
        return bool(nodes) and not ({host_name, host_name.split(".")[0]} & nodes)

    # -- submission ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        for sub in ("logs", "work", "out"):  # never a link planted in their place: the jobs write through them
            safewrite.folder(self.results_dir / sub)
        # Workers run exactly the controller's benchmark: its zipapp, named by the hash of its bytes.
        artifact.install(self.results_dir)

    def trouble(self) -> str | None:
        return commands.accounting_trouble()

    def submit(self, tasks: Sequence[Task], sink: Sink) -> Iterator[list[Watched]]:
        """One sbatch per node shape (and per max_array_size tasks): a job array."""
        self._prepare()
        shapes: dict[tuple[int, int], list[Task]] = {}
        for task in tasks:
            shapes.setdefault((task.cell.gpus, task.cell.nodes), []).append(task)
        broken: str | None = None  # Slurm cannot take jobs at all: the rest is not started without more tries
        for (gpus, nodes), group in shapes.items():
            size = self.env.max_array_size
            for start in range(0, len(group), size):
                if self.ctx.stop.is_set():
                    return
                chunk = group[start:start + size]
                if broken:
                    self._not_started(chunk, broken, sink)
                else:
                    broken, new = self._submit_array(chunk, gpus, nodes, sink)
                    if new:
                        yield new

    def _not_started(self, tasks: Sequence[Task], reason: str, sink: Sink, extra: dict[str, Any] | None = None) -> None:
        self._report_now(tasks, not_started(reason, {"backend": "slurm", **(extra or {})}), sink)

    def _next_name(self) -> str:
        n = 1
        while os.path.lexists(self.results_dir / f"job-{n:03d}.sh"):
            n += 1
        return f"{n:03d}"

    def _manifest(self, tasks: Sequence[Task], sink: Sink) -> tuple[list[str], list[Task]]:
        """The manifest's lines and the tasks they carry; a task whose arguments cannot travel fails."""
        lines: list[str] = []
        runnable: list[Task] = []
        ids = {t.id for t in tasks}
        for sub in ("out", "work"):  # files an earlier attempt of these tasks left in a reused results_dir
            for name in os.listdir(self.results_dir / sub):
                if name.split(".", 1)[0] in ids:
                    (self.results_dir / sub / name).unlink(missing_ok=True)
        seen = results_seen(self.env, self.results_dir)
        for task in tasks:
            if task.cell.workload is not None and task.cell.workload.files:
                try:  # beside the zipapp, in the results directory every node (and container) sees
                    stage(task.cell.workload.files, self.results_dir)
                except (Changed, OSError) as e:
                    self._not_started([task], f"workload files: {e}", sink)
                    continue
            args = arguments(task, seen)
            bad = [a for a in args if not a or "\t" in a or any(c in a for c in CONTROL)]
            if bad or not TASK_ID_RE.match(task.id):
                now = time.time()
                self._report_now([task], Outcome(
                    Status.FAILED, reason=f"bench argument {bad[0] if bad else task.id!r} is empty or has a tab or "
                    "newline: the slurm manifest cannot carry it", started_at=now, finished_at=now,
                    extra={"backend": "slurm"}), sink)
                continue
            lines.append("\t".join([task.id, *args]))
            runnable.append(task)
        return lines, runnable

    def _submit_array(self, tasks: Sequence[Task], gpus: int, nodes: int,
                      sink: Sink) -> tuple[str | None, list[Watched]]:
        """sbatch one array; returns why Slurm takes no jobs at all (unreachable), else None, and its tasks."""
        now = time.time()
        lines, runnable = self._manifest(tasks, sink)
        if not runnable:
            return None, []
        name = self._next_name()
        manifest = f"manifest-{name}.tsv"
        script = self.results_dir / f"job-{name}.sh"
        safewrite.write_text(self.results_dir / manifest, "\n".join(lines) + "\n", mode=0o644)
        limit = time_limit(self.env, max(t.cell.run.timeout for t in runnable))
        safewrite.write_text(script, mode=0o644, text=render_script(array_job(
            self.env, count=len(runnable), gpus=gpus, nodes=nodes, time=limit, run_id=self.ctx.run_id,
            results_dir=self.results_dir, manifest=manifest, bench_name=artifact.name(),
            identity=self._image_identity())))
        facts = {"slurm_script": str(script)}
        try:
            job = commands.sbatch(script, say=self._say)
        except SlurmError as e:
            if e.unreachable or e.transient:
                self._not_started(runnable, str(e), sink, facts)
                return str(e), []
            self._not_started(runnable, f"sbatch refused the job: {e.detail}", sink, facts)
            return None, []
        except BackendError as e:  # sbatch timed out: the job may exist; its tasks are not watched
            now = time.time()
            self._report_now(runnable, Outcome(Status.FAILED, reason=f"{e} (if the job was queued after all, "
                                               f"scancel it: {script})", started_at=now, finished_at=now,
                                               extra={"backend": "slurm", **facts}), sink)
            return str(e), []
        new = [Watched(t, state_key(t), job, i, self.results_dir, now, self.ctx.run_id)
               for i, t in enumerate(runnable)]
        if self.ctx.verbose:
            self._say(f"submitted job {job}: {len(runnable)} tasks, {nodes} node(s) x {gpus} "
                      f"process(es), time limit {limit} ({script})")
        return None, new

    def _image_identity(self) -> ImageIdentity | None:
        """The hash of the container's image file or directory, taken once per session (cached on disk)."""
        if self.env.container is None:
            return None
        path = containers.runtime(self.env.container).image_file()
        if path is None:
            return None
        if self._identity is None:
            began = time.time()
            self._identity = image_identity(path, cache=self.workdir / "image-ids.json")
            if time.time() - began > 5:
                self._say(f"hashed the image {path} in {time.time() - began:.0f} s (kept in "
                          f"{self.workdir / 'image-ids.json'} while it is unchanged)")
        return self._identity

    # -- polling ---------------------------------------------------------------------------------

    def _sacct(self, watch: Mapping[str, Watched], first: bool) -> tuple[dict[tuple[str, int], SacctRow], str | None]:
        """The one sacct call; on failure no rows and what went wrong (result files are still collected)."""
        try:
            rows = commands.sacct(sorted({w.job for w in watch.values()}, key=int))
            self._sacct_failing_since = None
            return rows, None
        except BackendError as e:
            # Results still come as files; sacct is needed only for timeouts, cancels and failures.
            if self._sacct_failing_since is None:
                self._sacct_failing_since = time.time()
                self._say(f"sacct failed ({e}); still collecting result files" + ("" if first else ", and retrying"))
            return {}, f"Slurm accounting does not answer ({e})"

    def poll(self, watch: Mapping[str, Watched], first: bool) -> Polled:
        """One sacct call and one directory listing per results dir: what is over (its outcome kept for
        `collect`), and what went wrong with sacct, if it did: result files are still collected then.

        A task that neither sacct nor squeue knows long after its submission is lost: on the
        first look at an earlier run's jobs it is forgotten (so that `matrix run` submits it
        again); a job this run submitted and Slurm lost is a failed repeat.
        """
        rows, trouble = self._sacct(watch, first)
        listings: dict[Path, set[str]] = {}
        for d in {w.results_dir for w in watch.values()}:
            try:
                listings[d] = set(os.listdir(d / "out"))
            except OSError:
                listings[d] = set()
        now = time.time()
        finished: list[tuple[Watched, Outcome]] = []
        suspects: list[Watched] = []
        waiting: list[Watched] = []
        for w in watch.values():
            row = rows.get((w.job, w.index))
            if row is not None and row.state in STARTED_STATES:
                self.started(w)
            if f"{w.task.id}.done" in listings[w.results_dir]:
                outcome = task_outcomes.from_files(w, row, self._extra(w, row))
                if outcome.result is None and outcome.status not in (Status.OK, Status.NOT_STARTED):
                    # Killed before it printed a result (time limit, scancel, a node lost): the batch
                    # script still publishes its marker, so the Slurm state, once final, says why.
                    if row is not None and task_outcomes.decided_by_state(row.state):
                        outcome = task_outcomes.from_state(self.env, w, row, self._extra(w, row))
                    elif row is None or row.state not in FINISHED_STATES:
                        w.finished_seen = w.finished_seen or now
                        if now - w.finished_seen < RESULT_GRACE_S and self._sacct_failing_since is None:
                            continue
                finished.append((w, outcome))
            elif row is not None and row.state in FINISHED_STATES:
                if row.state in ("COMPLETED", "FAILED"):
                    # The result may not be visible yet on a network filesystem: wait for it, unless the job
                    # ended long ago (LONG_OVER_S).
                    w.finished_seen = w.finished_seen or now
                    long_over = row.end is not None and now - row.end >= LONG_OVER_S
                    if not long_over and now - w.finished_seen < RESULT_GRACE_S and self._sacct_failing_since is None:
                        continue
                finished.append((w, task_outcomes.from_state(self.env, w, row, self._extra(w, row))))
            elif row is None and not rows and self._sacct_failing_since is not None:
                continue
            elif row is None and now - w.submitted_at > LOST_AFTER_S and not any(k[0] == w.job for k in rows):
                suspects.append(w)
            elif row is None or row.state == "PENDING":
                waiting.append(w)
        lost, gone = self._lost(suspects, first, now)
        finished += gone
        finished += self._blocked(waiting, now)
        self._outcomes.update((w.key, outcome) for w, outcome in finished)
        return Polled([w for w, _ in finished], lost, trouble)

    def collect(self, w: Watched) -> Outcome:
        return self._outcomes.pop(w.key)

    def cancel(self, watched: Sequence[Watched]) -> list[str]:
        ids = _array_ids(watched)
        commands.scancel(ids)
        return ids

    def _lost(self, suspects: list[Watched], first: bool, now: float) -> tuple[list[str], list[tuple[Watched, Outcome]]]:
        """Tasks neither sacct nor squeue knows: (keys to forget, failed outcomes of this run's tasks)."""
        if not suspects:
            return [], []
        # Accounting can lag far behind under load: ask the controller before calling a job lost.
        queued = commands.queued_jobs()
        forget: list[str] = []
        failed: list[tuple[Watched, Outcome]] = []
        for w in suspects:
            if queued is None or w.job in queued:
                continue
            if first:
                forget.append(w.key)
            else:
                failed.append((w, Outcome(
                    Status.FAILED, None, task_outcomes.job_log(w), f"Slurm lost job {w.job_id}: neither "
                    f"accounting (sacct) nor the controller (squeue) knows it {now - w.submitted_at:.0f} s "
                    "after its submission", w.submitted_at, now, self._extra(w, None))))
        return forget, failed

    def _blocked(self, waiting: list[Watched], now: float) -> list[tuple[Watched, Outcome]]:
        """Say why pending tasks wait; scancel those whose reason will not clear (pending.NEVER_CLEARS)
        once it has lasted blocked_after seconds: they are `not_started`, with the reason."""
        if not waiting:
            return []
        try:
            reasons = commands.pending(sorted({w.job for w in waiting}, key=int))
        except BackendError:
            return []  # squeue does not answer: keep waiting, sacct still tells when they end
        nodes: dict[str | None, dict[str, str] | None] = {}
        blocked: list[tuple[Watched, str]] = []
        news: dict[tuple[str, str], list[int]] = {}  # (job, reason) -> array indices that now pend for it
        for w in waiting:
            p = reasons.get((w.job, w.index))
            if p is None:
                continue
            if pending.describe(p) != w.pending_reason:
                w.pending_reason = pending.describe(p)
                news.setdefault((w.job, w.pending_reason), []).append(w.index)
            if p.reason == pending.NODES_UNAVAILABLE and p.partition not in nodes:
                nodes[p.partition] = commands.node_states(p.partition or self.env.partition)
            why = pending.blocked(p, nodes.get(p.partition))
            if why is None:
                w.blocked_since = None
                continue
            w.blocked_since = w.blocked_since or now
            if now - w.blocked_since >= self.env.blocked_after:
                blocked.append((w, why))
        for (job, reason), indices in news.items():
            self._say(f"job {job} pends ({len(indices)} task{'s' if len(indices) != 1 else ''}): {reason}")
        if not blocked:
            return []
        commands.scancel(_array_ids([w for w, _ in blocked]))
        self._say(f"cancelled {len(blocked)} pending tasks that cannot start: {blocked[0][1]}")
        return [(w, not_started(f"Slurm job {w.job_id} cannot start ({why}); cancelled with scancel",
                                {**self._extra(w, None), "slurm_state": "PENDING", "slurm_reason": why}))
                for w, why in blocked]

    def _extra(self, w: Watched, row: SacctRow | None) -> dict[str, Any]:
        return task_outcomes.extra(self.env, self.ctx.run_id, w, row)

    def extra(self, w: Watched) -> dict[str, Any]:
        return self._extra(w, None)

def _array_ids(watched: Sequence[Watched]) -> list[str]:
    """scancel's names for these array tasks: one `job_[i,j,...]` per job."""
    by_job: dict[str, list[int]] = {}
    for w in watched:
        by_job.setdefault(w.job, []).append(w.index)
    return [f"{job}_[{','.join(str(i) for i in sorted(idx))}]" for job, idx in by_job.items()]
