"""One run's side of the claim protocol (docs/internals.md, "Concurrent runs"), behind a handful of verbs: the run
loop takes tasks, records their outcomes, asks what other runs hold, and ends. The steps stay in the store: the
holder row and its heartbeat, claims taken over from dead runs, one measurement at a time on a machine, the wait of
an uncalibrated cell's other repeats, a result stored with the release of its claim (or kept in the journal on a
full disk), and every claim released at the end."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runner.base.errors import StoreError
from runner.domain.outcomes import Outcome, Status
from runner.store.liveness import Holder
from runner.store.results import Results

if TYPE_CHECKING:
    from runner.domain.cells import Task

Needs = Callable[[Status | None, int], bool]


@dataclass
class Taken:
    """What `RunClaims.take` answers for some tasks."""

    mine: list[Task] = field(default_factory=list)                          # this run measures them now
    held: dict[str, tuple[Task, Holder]] = field(default_factory=dict)    # by task id: a live run holds them
    gone: list[Task] = field(default_factory=list)                          # stored meanwhile, or not needed now
    taken_over: list[Holder] = field(default_factory=list)                  # dead runs whose claims were taken


class RunClaims:
    """A run's claims on a store, from `Store.begin_run` to `end`. `needs(status, row id)`: whether a repeat is still
    to be measured (the run's --force and --rerun-failed); `on_machine_busy`: told each time a repeat to be measured
    here waits for another run that measures on this machine (every `poll_s`)."""

    def __init__(self, store: Results, run_id: str, needs: Needs, poll_s: float,
                 on_machine_busy: Callable[[Holder], None] | None) -> None:
        self.store, self.run_id, self.needs = store, run_id, needs
        self.poll_s, self.on_machine_busy = poll_s, on_machine_busy

    def take(self, tasks: Sequence[Task], here: bool = False) -> Taken:
        """Claim these tasks. `here`: they are measured on this machine, which measures one repeat at a time, so
        a task waits (polling) while another live run measures here, then is claimed again."""
        taken = Taken()
        answers = self.store.claim(self.run_id, tasks, self.needs, here)
        for t in tasks:
            answer = answers[t.id]
            while answer.machine is not None:
                if self.on_machine_busy is not None:
                    self.on_machine_busy(answer.machine)
                time.sleep(self.poll_s)
                answer = self.store.claim(self.run_id, [t], self.needs, here)[t.id]
            if answer.mine:
                taken.mine.append(t)
                if answer.taken is not None:
                    taken.taken_over.append(answer.taken)
            elif answer.holder is not None:
                taken.held[t.id] = (t, answer.holder)
            else:
                taken.gone.append(t)
        said = {h.run_id for h in taken.taken_over}
        taken.taken_over += [h for h in self.store.take_reaped() if h.run_id not in said]
        return taken

    def record(self, task: Task, outcome: Outcome, remaining: int = 0) -> bool:
        """Store a task's outcome and release its claim; False when another live run holds its repeat or it no longer
        needs measuring (one result per repeat). A full disk raises `StoreFull`, the result kept in the journal
        (`remaining`: how many more results the run expects, for the room it asks for)."""
        return self.store.record(self.run_id, task, outcome, self.needs, remaining=remaining)

    def held(self, keys: Iterable[str]) -> dict[tuple[str, int], Holder]:
        """The repeats of these cells that other live runs hold, with the run that holds each."""
        return self.store.claims(keys, self.run_id)

    def calibrated(self, keys: Iterable[str]) -> dict[str, int]:
        """The measured iterations calibrated for these cells (`iterations: auto`); a cell without is not named."""
        return self.store.calibrations(keys)

    def release(self, tasks: Sequence[Task]) -> None:
        """Give back the claims of tasks this run will not measure (their environment could not start)."""
        self.store.release(self.run_id, tasks)

    def end(self, status: str) -> None:
        """Close the run with its status (complete, incomplete, submitted, interrupted: runner/store/runs.py's
        `run_status`) and release every claim it holds."""
        self.store.finish_run(self.run_id, status)

    def abandon(self) -> None:
        """Close the run as failed (a controller crash); its results stay. A store that cannot take even that (a full
        disk: the end is kept in the journal) is left to the error being raised."""
        try:
            self.store.finish_run(self.run_id, "failed")
        except StoreError:
            pass


class ClaimProtocol(Results):
    def begin_run(self, run_id: str, matrix_path: str | None, matrix_name: str | None, argv: list[str], needs: Needs,
                  *, poll_s: float = 2.0, on_machine_busy: Callable[[Holder], None] | None = None) -> RunClaims:
        """Record the run and the process behind it (dead runs are reaped first; a heartbeat keeps it alive for
        other hosts) and return its side of the claim protocol."""
        self.start_run(run_id, matrix_path, matrix_name, argv)
        return RunClaims(self, run_id, needs, poll_s, on_machine_busy)
