"""Claims: each repeat is claimed in the store before it is measured, and a claim dies with its holder
(docs/internals.md, "Concurrent runs")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.domain.outcomes import Status
from runner.store.liveness import MACHINE, Holder
from runner.store.runs import Runs

if TYPE_CHECKING:
    from runner.domain.cells import Task


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: `mine`, or held by a live `holder`, or neither (no longer needed). `taken`: the
    dead run whose claim this one took over. `machine`: the live run measuring on this machine now (a claim
    `here` waits for it, so that two measurements never share the processors)."""

    mine: bool
    holder: Holder | None = None
    taken: Holder | None = None
    machine: Holder | None = None




class Claims(Runs):
    def claim(self, run_id: str, tasks: Iterable[Task], needs: Callable[[Status | None, int], bool],
              here: bool = False) -> dict[str, Claim]:
        """Claim repeats for `run_id`, in one transaction: a repeat is this run's when it already holds it, or
        when no live run holds it and `needs(current status, its row id)` says it is still to be measured.
        A claim of a dead run is taken over. A repeat of an `iterations: auto` cell that has no calibrated count
        yet waits (held) while another live run holds a repeat of that cell. `here`: the repeats are measured on this machine, which measures
        one repeat at a time: while another live run measures here, the answer is `machine` (try again).
        Returns each task's answer by task id."""
        answers: dict[str, Claim] = {}
        tasks = list(tasks)
        if not tasks:
            return answers
        self._import_waiting()
        now = time.time()
        with self._tx():
            for task in tasks:
                key, r = task.cell.key, task.repeat
                h = self._claim_holder(key, r)
                if h is not None and h.run_id == run_id:
                    answers[task.id] = Claim(True)
                    continue
                if h is not None and self._live_or_reap(h, now):
                    answers[task.id] = Claim(False, h)
                    continue
                status, row_id = self._latest(key, r)
                if not needs(status, row_id):
                    answers[task.id] = Claim(False)
                    continue
                calibrating = self._calibrating_elsewhere(key, run_id, now) if task.cell.run.calibrated else None
                if calibrating is not None:
                    answers[task.id] = Claim(False, calibrating)
                    continue
                busy = self._measuring_here(run_id, now) if here else None
                if busy is not None:
                    answers[task.id] = Claim(False, machine=busy)
                    continue
                self.db.execute("INSERT OR REPLACE INTO claims (cell_key, repeat, run_id, claimed_at, machine) "
                                "VALUES (?, ?, ?, ?, ?)", (key, r, run_id, now, MACHINE if here else None))
                answers[task.id] = Claim(True, taken=h)
        return answers

    def _measuring_here(self, run_id: str, now: float) -> Holder | None:
        """The live run, other than `run_id`, that measures a repeat on this machine now (dead ones are reaped)."""
        return self._live_holder([other for (other,) in self.db.execute(
            "SELECT DISTINCT run_id FROM claims WHERE machine=? AND run_id<>?", (MACHINE, run_id)).fetchall()], now)

    def _calibrating_elsewhere(self, key: str, run_id: str, now: float) -> Holder | None:
        """The live run, other than `run_id`, holding a repeat of an uncalibrated cell: it may be calibrating it,
        so no other repeat of that cell starts before its count is known (dead holders are reaped)."""
        if self._calibrated(key):
            return None
        return self._live_holder([other for (other,) in self.db.execute(
            "SELECT DISTINCT run_id FROM claims WHERE cell_key=? AND run_id<>?", (key, run_id)).fetchall()], now)

    def claims(self, keys: Iterable[str], run_id: str | None = None) -> dict[tuple[str, int], Holder]:
        """The repeats of these cells that a live run other than `run_id` is measuring, with that run."""
        keys = list(keys)
        found: dict[tuple[str, int], Holder] = {}
        with self._guard():
            if self.readonly and not self._has("claims"):
                return found
            holders = {k: h for k, h in self._holders(" WHERE ended_at IS NULL").items() if h.alive()}
            for row in self._each_in("SELECT cell_key, repeat, run_id FROM claims WHERE cell_key IN ({marks})", keys):
                if row[2] != run_id and row[2] in holders:
                    found[(row[0], row[1])] = holders[row[2]]
        return found

    def release(self, run_id: str, tasks: Iterable[Task] = ()) -> None:
        """Give back claims this run holds and will not measure."""
        with self._tx():
            self.db.executemany("DELETE FROM claims WHERE cell_key=? AND repeat=? AND run_id=?",
                                [(t.cell.key, t.repeat, run_id) for t in tasks])

