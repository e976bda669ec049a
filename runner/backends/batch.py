"""A batch scheduler as a backend: four verbs over the store's batch jobs (docs/internals.md, "How to add a
batch scheduler").

A scheduler says how to `submit` tasks, `poll` the jobs it was given, `collect` a job that is over into an
outcome and `cancel` jobs. `BatchBackend` does the rest, the same for every scheduler: what was submitted is
kept in the result store (table batch_jobs) until it is collected, so a later `matrix run` or `matrix
collect` against the same --db finds the jobs an earlier, interrupted or `--no-wait` run left running and
submits only what is missing; it polls until every task is in, reports each outcome once, and on Ctrl-C
offers to cancel what is still queued.
"""

from __future__ import annotations

import abc
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from runner.backends.base import Backend, Sink, not_started
from runner.backends.context import RunContext
from runner.base.errors import BackendError
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status
from runner.store import BatchJob, BatchJobs


def state_key(task: Task) -> str:
    return f"{task.cell.env_name}\t{task.cell.key}\t{task.repeat}"


@dataclass
class Watched:
    """A submitted task the controller waits for: job `job`, its `index`-th task (0 for a job of one task)."""

    task: Task
    key: str
    job: str
    index: int
    results_dir: Path
    submitted_at: float
    run_id: str
    started: bool = False
    finished_seen: float | None = None   # when the scheduler first said it is over (its files may lag)
    pending_reason: str | None = None    # why the scheduler keeps it waiting, as last said
    blocked_since: float | None = None   # since when that reason says it can never start

    @property
    def job_id(self) -> str:
        return f"{self.job}_{self.index}"

    @classmethod
    def from_record(cls, task: Task, key: str, rec: BatchJob) -> Watched:
        return cls(task, key, rec.job, rec.index, Path(rec.results_dir), rec.submitted_at, rec.run_id)

    def record(self) -> BatchJob:
        return BatchJob(self.key, self.task.id, self.run_id, self.job, self.index, str(self.results_dir),
                        self.submitted_at)


class SubmittedJobs:
    """One backend's rows of the store's batch_jobs table."""

    def __init__(self, store: BatchJobs | None, backend: str) -> None:
        self.store = store
        self.backend = backend

    def _store(self) -> BatchJobs:
        if self.store is None:
            raise BackendError(f"the {self.backend} backend keeps what it submitted in the result store: "
                               "RunContext.store must be set")
        return self.store

    def load(self) -> dict[str, BatchJob]:
        return self._store().open_jobs(self.backend)

    def add(self, watched: Sequence[Watched]) -> None:
        self._store().add_jobs(self.backend, [w.record() for w in watched])

    def remove(self, keys: Sequence[str], how: str = "collected") -> None:
        self._store().close_jobs(self.backend, keys, how)


@dataclass
class Polled:
    """What one look at the watched jobs found: the ones `over` (to `collect`), the keys of `lost` ones
    (forgotten, so that `matrix run` submits them again) and, when the scheduler does not answer, why."""

    over: list[Watched] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    trouble: str | None = None


class BatchBackend(Backend):
    """A backend whose tasks a batch scheduler runs: `submit`, `poll`, `collect` and `cancel` are its own."""

    queued = True
    scheduler: ClassVar[str]      # how messages name the scheduler ("Slurm")
    cancel_tool: ClassVar[str]    # how they name its cancel command ("scancel")
    poll_interval: float = 2.0    # seconds between two polls

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        super().__init__(env, ctx)
        self.state = SubmittedJobs(ctx.store, self.kind)
        self._reported: set[str] = set()  # state keys reported by this instance

    # -- the four verbs ---------------------------------------------------------------------------------

    @abc.abstractmethod
    def submit(self, tasks: Sequence[Task], sink: Sink) -> Iterator[list[Watched]]:
        """Hand the tasks to the scheduler, yielding each group as soon as it is submitted (it is kept in the
        store at once); a task that cannot go is reported through `sink` (`not_started`, `failed`)."""

    @abc.abstractmethod
    def poll(self, watch: Mapping[str, Watched], first: bool) -> Polled:
        """One look at the watched jobs. `first`: the first look at jobs an earlier run submitted. Call
        `started(w)` for a job seen running."""

    @abc.abstractmethod
    def collect(self, w: Watched) -> Outcome:
        """The outcome of a job `poll` found over."""

    @abc.abstractmethod
    def cancel(self, watched: Sequence[Watched]) -> list[str]:
        """Cancel these jobs; returns their ids as the scheduler names them."""

    def trouble(self) -> str | None:
        """Why nothing new may be submitted now, though nothing is watched (e.g. no accounting); None: go."""
        return None

    # -- the flow, the same for every scheduler ---------------------------------------------------------

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
            trouble = self._poll(watch, sink, first=True) if watch else self.trouble()
            missing = [t for t in tasks if state_key(t) not in watch and state_key(t) not in self._reported]
            if not self.ctx.submit:
                if missing:
                    self._say(f"{len(missing)} tasks were never submitted, or {self.scheduler} does not know their "
                              "jobs: `matrix run` submits them")
                return
            if trouble:
                # Without accounting, timeouts and cancels would go unseen: submit nothing new.
                self._report_now(missing, not_started(f"not submitted: {trouble}", {"backend": self.kind}), sink)
                missing = []
            for new in self.submit(missing, sink) if missing else ():
                self.state.add(new)
                watch.update({w.key: w for w in new})
            if not self.ctx.wait:
                self._leave(watch)
                return
            while watch:
                if self.ctx.stop.wait(self.poll_interval):
                    self._interrupted(watch, sink)
                    return
                self._poll(watch, sink)
        except KeyboardInterrupt:
            self._interrupted(watch, sink)
            raise

    def _poll(self, watch: dict[str, Watched], sink: Sink, first: bool = False) -> str | None:
        """One poll, its outcomes reported; returns what went wrong with the scheduler, if it did."""
        polled = self.poll(watch, first)
        reported: list[str] = []
        try:
            for w in polled.over:
                outcome = self.collect(w)
                self.started(w)
                sink(w.task, outcome)
                reported.append(w.key)
                self._reported.add(w.key)
        finally:
            for key in reported + polled.lost:
                watch.pop(key, None)
            self.state.remove(reported, "collected")
            self.state.remove(polled.lost, "lost")
        return polled.trouble

    def started(self, w: Watched) -> None:
        """Say once that a watched task started (the progress display)."""
        if not w.started:
            w.started = True
            if self.ctx.on_start:
                self.ctx.on_start(w.task)

    def _report_now(self, tasks: Sequence[Task], outcome: Outcome, sink: Sink) -> None:
        for task in tasks:
            sink(task, outcome)
            self._reported.add(state_key(task))

    def _say(self, text: str) -> None:
        print(f"{self.kind} ({self.env.name}): {text}", file=sys.stderr, flush=True)

    def _leave(self, watch: dict[str, Watched]) -> None:
        """--no-wait: say what keeps running and who gathers it."""
        if watch and self.ctx.back_later:
            self._say(f"{len(watch)} tasks queued or running as {self.scheduler} jobs {jobs_text(watch)}; this run "
                      "gathers them before it ends")
        elif watch:
            self._say(self._how_to_collect(watch))

    def _how_to_collect(self, watch: dict[str, Watched]) -> str:
        return (f"{len(watch)} tasks are queued or running as {self.scheduler} jobs {jobs_text(watch)}; `matrix "
                "collect` (or `matrix run` again, with the same -m and --db) gathers their results")

    # -- Ctrl-C ------------------------------------------------------------------------------------------

    def _interrupted(self, watch: dict[str, Watched], sink: Sink) -> None:
        """Offer to cancel what is still queued or running; by default it keeps running."""
        if not watch:
            return
        if sys.stdin is not None and sys.stdin.isatty():
            print(f"\n{len(watch)} {self.scheduler} tasks of environment {self.env.name!r} are not finished "
                  f"(jobs {jobs_text(watch)}). Cancel them with {self.cancel_tool}? (y/N) ", end="",
                  file=sys.stderr, flush=True)
            try:
                answer = sys.stdin.readline().strip().lower()
            except (KeyboardInterrupt, EOFError):
                answer = ""
            if answer in ("y", "yes"):
                self._cancel(watch, sink)
                return
        self._say("interrupted: " + self._how_to_collect(watch))

    def _cancel(self, watch: dict[str, Watched], sink: Sink) -> None:
        ids = self.cancel(list(watch.values()))
        now = time.time()
        reported = []
        try:
            for key, w in list(watch.items()):
                sink(w.task, Outcome(Status.CANCELLED, None, "", f"cancelled with {self.cancel_tool} "
                                     f"({self.scheduler} job {w.job_id})", w.submitted_at, now, self.extra(w)))
                reported.append(key)
                watch.pop(key)
        finally:
            self.state.remove(reported, "cancelled")
        self._say(f"cancelled {len(reported)} tasks ({', '.join(ids)})")

    def extra(self, w: Watched) -> dict[str, Any]:
        """What a cancelled task's outcome records about its job."""
        return {"backend": self.kind, "job": w.job_id}


def jobs_text(watch: Mapping[str, Watched]) -> str:
    """The job ids, in submission order when they are numbers."""
    return ", ".join(sorted({w.job for w in watch.values()}, key=lambda j: (len(j), j)))

