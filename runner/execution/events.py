"""What a run tells whoever watches it: `RunListener`, one typed method per event (the printer in
runner/execution/printer.py is one listener; a test can be another), and the `RunReport` a run returns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.base.exitcodes import Exit
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Outcome
from runner.record.stored import StoredRepeat
from runner.store.liveness import Holder


@dataclass
class RunReport:
    run_id: str | None
    planned: int = 0
    stored: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False
    pending: int = 0
    unsuccessful: Counter[str] = field(default_factory=Counter)  # current statuses of selected repeats, not ok
    busy: dict[str, Holder] = field(default_factory=dict)  # runs that held selected repeats this one did not wait for
    deferred: int = 0  # repeats of `iterations: auto` cells left until their cell's first repeat has calibrated
    not_started: Counter[str] = field(default_factory=Counter)  # environment -> repeats it could not start (unstored)
    cannot_start: dict[str, str] = field(default_factory=dict)  # environment -> why its session could not open

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return Exit.INTERRUPTED
        if self.unsuccessful or self.not_started:
            return Exit.NOT_MEASURED
        return Exit.BUSY if self.busy else Exit.OK


Held = dict[str, tuple[Task, Holder]]  # task id -> (the task, the live run that holds it)


class RunListener:
    """The events of one `matrix run` (or `matrix collect`), in the order they may come. Every method does
    nothing here: a listener overrides the ones it cares about."""

    def watching(self) -> AbstractContextManager[Any]:
        """Entered while the run measures (the printer's progress bar)."""
        return nullcontext()

    # before anything runs
    def nothing_to_run(self, cells: Sequence[Cell], repeats: int | str, store: Path,
                       unsuccessful: Counter[str] | None = None) -> None: ...
    def nothing_to_collect(self, store: Path) -> None: ...
    def left_out(self, tasks: Sequence[Task]) -> None:
        """`matrix collect` leaves these tasks to `matrix run`."""

    def started(self, run_id: str, n: int, stored: int, again: int, store: Path, run: RunSettings | None = None,
                others: dict[tuple[str, int], Holder] | None = None,
                mine: Collection[tuple[str, int]] = ()) -> None: ...

    # while it runs
    def waiting(self, held: Held) -> None: ...
    def machine_busy(self, h: Holder) -> None: ...
    def taken_over(self, h: Holder) -> None: ...
    def task_started(self, task: Task) -> None: ...
    def cannot_start(self, env_name: str, reason: str, tasks: Sequence[Task]) -> None:
        """These tasks' environment could not start (its image cannot be had, its engine is down): nothing is
        stored for them; told once per step that reaches the environment."""
    def outcome(self, task: Task, outcome: Outcome) -> None: ...
    def not_stored(self, task: Task, outcome: Outcome) -> None: ...
    def elsewhere_done(self, task: Task) -> None: ...
    def environment_done(self, env_name: str) -> None: ...
    def more(self, n: int) -> None: ...

    # at the end
    def interrupted(self, run_id: str, done: int, store: Path, left_queued: int) -> None: ...
    def summary(self, cells: Sequence[Cell], rows: Sequence[StoredRepeat], report: RunReport,
                held: Held | None = None) -> None: ...
