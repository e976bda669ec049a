"""Which repeats a run measures and in which order: pure functions of the cells, the store's statuses and
what each backend says about itself (runner/execution/execute.py runs what they decide)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from runner.analysis import frame
from runner.domain.cells import Cell, Task
from runner.domain.outcomes import RERUN_FAILED, Status
from runner.store import Store


def calibration_phase(tasks: Sequence[Task], calibrated: Collection[str]) -> tuple[list[Task], list[Task]]:
    """(now, later): an `iterations: auto` cell without a calibrated count runs one repeat first, which chooses the
    count; its other repeats come later, so that every repeat of a cell runs the same window. Every other task
    is run now."""
    now: list[Task] = []
    later: list[Task] = []
    first: set[str] = set()
    for t in tasks:
        key = t.cell.key
        if t.cell.run.calibrated and key not in calibrated:
            if key in first:
                later.append(t)
                continue
            first.add(key)
        now.append(t)
    return now, later


@dataclass(frozen=True)
class Want:
    """Which repeats a run measures: missing and unfinished ones, failed ones with --rerun-failed, all with
    --force; `since` is the newest result id when the run began, so a repeat stored after it (by this run or
    by another run on the same store) is not measured again."""

    rerun_failed: bool = False
    force: bool = False
    since: int = 0
    # Rows stored ok that admission sets aside (diverged or refused: runner/record/admission.py): with
    # --rerun-failed they are measured again, as a failed one is; the store itself only knows they said ok.
    set_aside: frozenset[int] = frozenset()

    def needs(self, status: Status | None, row_id: int = 0) -> bool:
        if status is None or not status.final:
            return True
        if row_id > self.since:
            return False
        if self.rerun_failed and row_id in self.set_aside:
            return True
        return self.force or (self.rerun_failed and status in RERUN_FAILED)


def want_for(cells: Sequence[Cell], store: Store, rerun_failed: bool = False, force: bool = False) -> Want:
    """What a run of these cells measures again (the store's newest row when it starts bounds it)."""
    since = store.last_id()
    aside = frozenset(i for _, i in _not_admitted(cells, store).values()) if rerun_failed else frozenset()
    return Want(rerun_failed, force, since, aside)


def todo(cells: Sequence[Cell], store: Store, rerun_failed: bool = False, force: bool = False,
         want: Want | None = None) -> list[Task]:
    """The repeats to run now: missing ones, interrupted or never started ones, and failed ones when asked (a
    stored ok that admission sets aside counts as failed)."""
    want = want or want_for(cells, store, rerun_failed, force)
    current = store.latest(c.key for c in cells)
    return [Task(cell, r) for cell in cells for r in range(cell.run.repeats)
            if want.needs(*current.get((cell.key, r), (None, 0)))]


def _not_admitted(cells: Sequence[Cell], store: Store) -> dict[tuple[str, int], tuple[Status, int]]:
    """The stored ok repeats of these cells that admission turns into diverged or refused (runner/analysis/
    admission.py), with their row ids."""
    df = frame(store.rows(keys=[c.key for c in cells]))
    bad = df[(df["stored_status"] == Status.OK.value) & (df["status"] != Status.OK.value)]
    return {(k, int(r)): (Status(s), int(i)) for k, r, s, i in zip(bad["cell_key"], bad["repeat"], bad["status"],
                                                                   bad["id"], strict=True)}


# Scheduling ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EnvWork:
    """One environment's tasks and what its backend says about how it runs."""

    tasks: tuple[Task, ...]
    queued: bool = False     # a batch scheduler: can be submitted now and collected later
    elsewhere: bool = False  # its tasks surely run on other machines


@dataclass(frozen=True)
class Step:
    work: EnvWork
    submit_only: bool = False  # submit and come back later in this same run


def schedule(work: Sequence[EnvWork], wait: bool = True, submit: bool = True) -> list[Step]:
    """The order of a run. Batch-scheduled environments are submitted first, so all their jobs wait in the
    scheduler's queue together. When those jobs surely run on other machines, the other environments run
    here meanwhile and the jobs are collected last; when they may share this host, the run waits for them
    first, so no measurement overlaps another. Without waiting (--no-wait) or with one environment, the
    matrix's order."""
    queued = [w for w in work if w.queued]
    others = [w for w in work if not w.queued]
    if not (wait and submit and queued and len(work) > 1):
        return [Step(w) for w in work]
    order = others + queued if all(w.elsewhere for w in queued) else queued + others
    return [Step(w, submit_only=True) for w in queued] + [Step(w) for w in order]


def rounds(tasks: Sequence[Task], interleave: bool, queued: Collection[str] = ()) -> list[list[Task]]:
    """The run's tasks in rounds. Without interleaving, one round. With it, round r holds repeat r of every
    cell, so the cells alternate and a change in the machine between the first and the last repeat falls on
    all of them alike; the tasks of the environments named in `queued` (a batch scheduler's, which orders its
    own jobs and is submitted once) all go in the first round."""
    if not interleave:
        return [list(tasks)] if tasks else []
    first = [t for t in tasks if t.cell.env_name in queued]
    by_repeat: dict[int, list[Task]] = defaultdict(list)
    for t in tasks:
        if t.cell.env_name not in queued:
            by_repeat[t.repeat].append(t)
    ordered = [by_repeat[r] for r in sorted(by_repeat)]
    if first:
        ordered = [first + (ordered[0] if ordered else []), *ordered[1:]]
    return ordered
