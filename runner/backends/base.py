"""The one interface every backend implements (docs/internals.md, "Backends")."""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar

from runner.backends.context import RunContext
from runner.base.errors import BackendError
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status

Sink = Callable[[Task, Outcome], None]


@dataclass(frozen=True)
class Probe:
    """One line of `matrix doctor`: ok is None when the check does not apply here."""

    name: str
    ok: bool | None
    detail: str


class NotStarted(BackendError):
    """The environment could not start (an image that cannot be had, an engine or a GPU runtime that is not there,
    no interpreter, no scheduler): raised out of the backend's session, its tasks are not run and nothing is stored
    for them (nothing was tried); the run says so once, is `incomplete`, and the next run tries them again."""


def not_started(reason: str, extra: dict[str, Any] | None = None) -> Outcome:
    """The outcome of a task whose environment could not start."""
    now = time.time()
    return Outcome(Status.NOT_STARTED, reason=reason, started_at=now, finished_at=now, extra=dict(extra or {}))


class Interrupted(KeyboardInterrupt):
    """Ctrl-C arrived during a task: carries that task's `cancelled` outcome to the sink."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("interrupted")
        self.outcome = outcome


class Backend(abc.ABC):
    """Runs the tasks of one environment and always cleans up after itself.

    `run` reports every task through `sink` exactly once (a backend that `claims_each_task` skips, without
    a report, a task whose claim `ctx.claim` refuses: another run measures it), unless the environment cannot
    start at all: then it raises NotStarted (from `__enter__` or `run`) and the tasks it has not reported are not
    run. A task that cannot run is an outcome with the reason, not an exception: `not_started` when a batch job
    could not start, `failed` when the repeat itself failed. On KeyboardInterrupt a backend stops
    the task in flight, reports it `cancelled` and re-raises; `__exit__` still cleans up.
    """

    kind: ClassVar[str]
    config: ClassVar[type[EnvironmentBase]]
    # A batch scheduler: `run` with ctx.wait False submits and returns, and a later `run` of the same
    # tasks collects them. `matrix run` submits such environments first, then runs the others.
    queued: ClassVar[bool] = False
    # Claims each task in the store (ctx.claim) just before it starts it, so that runs sharing the store
    # share its tasks; for a backend that does not, the executor claims all its tasks before `run`.
    claims_each_task: ClassVar[bool] = False

    def __init__(self, env: EnvironmentBase, ctx: RunContext) -> None:
        self.env = env
        self.ctx = ctx

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    @abc.abstractmethod
    def run(self, tasks: Sequence[Task], sink: Sink) -> None:
        """Run the tasks; report each through sink as soon as its outcome is known."""

    def elsewhere(self) -> bool:
        """Whether this environment's tasks surely run on machines other than this one, so that work
        here may overlap them without disturbing their measurements."""
        return False

    # What `doctor` looks at, in a few words: `matrix doctor` says it while it probes (some probes wait on an engine).
    probes: ClassVar[str] = ""

    @classmethod
    def doctor(cls) -> list[Probe]:
        """What this host offers for this backend."""
        return []

    @classmethod
    def clean(cls, run_id: str | None = None) -> list[str]:
        """Remove what interrupted runs left behind; returns what was removed."""
        return []


class SequentialBackend(Backend):
    """A backend that runs its tasks one after another, each a fresh process (local, docker); each is
    claimed just before it starts, so two runs on one store take turns at the tasks they share."""

    claims_each_task = True

    def run(self, tasks: Sequence[Task], sink: Sink) -> None:
        for task in tasks:
            if self.ctx.stop.is_set():
                return
            if self.ctx.claim is not None and not self.ctx.claim(task):
                continue
            if self.ctx.prepare is not None:
                task = self.ctx.prepare(task)
            if self.ctx.on_start:
                self.ctx.on_start(task)
            try:
                outcome = self.run_one(task)
            except Interrupted as stop:
                sink(task, stop.outcome)
                raise
            sink(task, outcome)
            if outcome.status is Status.CANCELLED:
                return

    @abc.abstractmethod
    def run_one(self, task: Task) -> Outcome:
        """Run one repeat to its end (or its timeout) and say how it went."""
