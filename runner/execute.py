"""`matrix run`: decide what is missing, hand each environment's tasks to its backend, store every outcome.

Three parts: `todo` (which repeats to run) and `schedule` (in which order, and which environments are
only submitted first) are pure functions; `RunPrinter` (runner/runprint.py) says what happens; `run_matrix` wires them to the
backends and the store.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from runner import adaptive_schedule as adaptive
from runner import backends
from runner import console as consoles
from runner.errors import BusyError, MatrixError, StoreError
from runner.exitcodes import Exit
from runner.matrix import Matrix
from runner.results import RERUN_FAILED, Outcome, Status
from runner.runprint import RunPrinter
from runner.spec import Cell, RunContext, Task
from runner.store import Holder, Store, new_run_id

# Exit statuses of `matrix run` and `matrix collect` (runner/exitcodes.py has the one table).
EXIT_OK = Exit.OK                    # every selected repeat is ok or unsupported (or still queued with --no-wait)
EXIT_ERROR = Exit.USAGE              # nothing ran: bad matrix file or option (one line on stderr)
EXIT_NOT_MEASURED = Exit.NOT_MEASURED  # some repeat ended failed, oom, timeout, cancelled or not_started
EXIT_REFERENCE_FAILED = Exit.REFERENCE_FAILED  # everything was measured, but a reference in the matrix file failed
EXIT_BUSY = Exit.BUSY                # --no-wait or collect: another live run holds some of the selected repeats
EXIT_INTERRUPTED = Exit.INTERRUPTED


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

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if self.unsuccessful:
            return EXIT_NOT_MEASURED
        return EXIT_BUSY if self.busy else EXIT_OK


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

    def needs(self, status: Status | None, row_id: int = 0) -> bool:
        if status is None or not status.final:
            return True
        if row_id > self.since:
            return False
        return self.force or (self.rerun_failed and status in RERUN_FAILED)


def todo(cells: Sequence[Cell], store: Store, rerun_failed: bool = False, force: bool = False) -> list[Task]:
    """The repeats to run now: missing ones, interrupted or never started ones, and failed ones when asked."""
    want = Want(rerun_failed, force, store.last_id())
    current = store.latest(c.key for c in cells)
    return [Task(cell, r) for cell in cells for r in range(cell.run.repeats)
            if want.needs(*current.get((cell.key, r), (None, 0)))]


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


# Running --------------------------------------------------------------------------------------------
def run_matrix(matrix: Matrix, cells: Sequence[Cell], store: Store, *, workdir: Path,
               rerun_failed: bool = False, force: bool = False, wait: bool = True, submit: bool = True,
               argv: Sequence[str] = (), console: Console | None = None, verbose: bool = False,
               poll_s: float = 2.0) -> RunReport:
    """Measure what the selected cells still need and store it. Every repeat is claimed in the store before
    it runs, so runs that share the store share the work: a repeat another live run holds is waited for
    (taken over if that run dies); `--no-wait` and `matrix collect` do not wait and exit 7 (busy) instead.
    `submit` False (`matrix collect`) only gathers batch jobs submitted earlier; it starts nothing."""
    printer = RunPrinter(console or consoles.stdout(), consoles.stderr(), cells, verbose)
    want = Want(rerun_failed, force, store.last_id())
    tasks = todo(cells, store, rerun_failed, force)
    if not submit:
        tasks, left_out = _collectable(tasks, store)
        printer.left_out(left_out)
    elif not tasks and not force:
        tasks = adaptive.more_tasks(cells, store)  # an adaptive cell whose interval is still too wide
    keys = {c.key for c in cells}
    if not tasks and not (wait and submit and store.claims(keys)):
        if submit:
            printer.nothing_to_run(cells, matrix.run.repeats_text, store.path)
        else:
            printer.nothing_to_collect(store.path)
        report = RunReport(None)
        report.unsuccessful = _unsuccessful(cells, store)
        return report
    run_id = new_run_id()
    final = _stored(cells, store)
    again = len(final & {(t.cell.key, t.repeat) for t in tasks})  # --rerun-failed, --force: measured again
    store.start_run(run_id, str(matrix.path) if matrix.path else None, matrix.name, list(argv))
    report = RunReport(run_id, planned=len(tasks))
    printer.started(run_id, len(tasks), len(final) - again, again, store.path, matrix.run,
                    store.claims(keys, run_id), {(t.cell.key, t.repeat) for t in tasks})
    reported: set[str] = set()   # stored by this run
    gone: set[str] = set()       # stored by another run meanwhile, or no longer needed
    held: dict[str, tuple[Task, Holder]] = {}  # held by another live run

    def claim(some: Sequence[Task], here: bool = False) -> list[Task]:
        answers = store.claim(run_id, some, want.needs, here)
        mine = []
        for t in some:
            answer = answers[t.id]
            while answer.machine is not None:
                # Another run measures on this machine now: wait for its turn (one measurement at a time).
                printer.machine_busy(answer.machine)
                time.sleep(poll_s)
                answer = store.claim(run_id, [t], want.needs, here)[t.id]
            if answer.mine:
                held.pop(t.id, None)
                if answer.taken is not None:
                    printer.taken_over(answer.taken)
                mine.append(t)
            elif answer.holder is not None:
                held[t.id] = (t, answer.holder)
            else:
                held.pop(t.id, None)
                if t.id not in gone:
                    gone.add(t.id)
                    printer.elsewhere_done(t)
        return mine

    def sink(task: Task, outcome: Outcome) -> None:
        left = report.planned - len(reported) - len(gone) - 1
        if store.record(run_id, task, outcome, want.needs, remaining=max(left, 0)):
            reported.add(task.id)
            report.stored[outcome.status.value] += 1
            printer.outcome(task, outcome)
        elif task.id not in gone:
            gone.add(task.id)
            printer.not_stored(task, outcome)

    def prepare(task: Task) -> Task:
        """The task as it runs: with its cell's calibrated count (iterations: auto), when one is stored."""
        if not task.cell.run.calibrated:
            return task
        return replace(task, iterations=store.calibrations([task.cell.key]).get(task.cell.key))

    ctx = RunContext(run_id=run_id, workdir=workdir, wait=wait, submit=submit, verbose=verbose,
                     on_start=printer.task_started, store=store, claim=lambda task: bool(claim([task], here=True)),
                     prepare=prepare)
    cannot_start: dict[str, str] = {}  # environments whose session could not open, with why: not tried again
    running: list[str] = []  # the environment whose backend is running (it speaks for itself if interrupted)

    def drive(steps: Sequence[Step]) -> None:
        last_step = {s.work.tasks[0].cell.env_name: i for i, s in enumerate(steps)}
        for i, step in enumerate(steps):
            step_ctx = replace(ctx, wait=False, back_later=True) if step.submit_only else ctx
            env_name = step.work.tasks[0].cell.env_name
            mine = [prepare(t) for t in step.work.tasks if t.id not in reported and t.id not in gone]
            if backends.get(step.work.tasks[0].cell.environment.backend).claims_each_task:
                # It claims each task as it starts it; leave out now what another run holds (no session for it).
                others = store.claims({t.cell.key for t in mine}, run_id)
                for t in mine:
                    if (t.cell.key, t.repeat) in others:
                        held[t.id] = (t, others[(t.cell.key, t.repeat)])
                mine = [t for t in mine if t.id not in held]
            else:
                mine = claim(mine)
            running[:] = [env_name]
            _run_environment(mine, step_ctx, sink, cannot_start)
            running.pop()
            if last_step[env_name] == i:
                printer.environment_done(env_name)

    def settle() -> None:
        """Wait for the repeats other live runs hold; run those whose holder died without storing them."""
        while held and wait and submit:
            printer.waiting(held)
            time.sleep(poll_s)
            live = store.claims({t.cell.key for t, _ in held.values()}, run_id)
            free = [t for t, _ in held.values() if (t.cell.key, t.repeat) not in live]
            for t, _ in list(held.values()):
                if (t.cell.key, t.repeat) in live:
                    held[t.id] = (t, live[(t.cell.key, t.repeat)])
            for t in free:
                held.pop(t.id)  # stored by its holder meanwhile, or its holder died: claim() tells
            if free:
                phases(free)

    deferred: list[Task] = []  # later repeats of auto cells whose calibrating repeat is not stored yet

    def phases(some: Sequence[Task]) -> None:
        """Run tasks, an auto cell's calibrating repeat before its others (calibration_phase); the others of a cell
        whose calibrating repeat ended without being stored here (held by another run, or submitted and not
        waited for) are deferred."""
        pending = list(some)
        while pending:
            known = store.calibrations({t.cell.key for t in pending if t.cell.run.calibrated})
            now, later = calibration_phase(pending, known)
            drive(_steps(now, ctx, matrix.run.interleave, wait, submit))
            unresolved = {t.cell.key for t in now if t.cell.run.calibrated and t.cell.key not in known
                          and t.id not in reported and t.id not in gone}
            deferred.extend(t for t in later if t.cell.key in unresolved)
            pending = [t for t in later if t.cell.key not in unresolved]

    steps = _steps(tasks, ctx, matrix.run.interleave, wait, submit)
    by_key = {c.key: c for c in cells}
    try:
        with printer.progress:
            phases(tasks)
            settle()
            while deferred and wait and submit:
                retry = list(deferred)
                deferred.clear()
                phases(retry)
                settle()
            # Adaptive repeats: rounds of more repeats for the cells whose interval is still too wide; and
            # what other runs add to these cells is waited for before deciding again.
            while wait and submit:
                extra = [t for t in adaptive.more_tasks(cells, store, run_id if force else None)
                         if t.id not in reported and t.id not in gone]
                if extra:
                    tasks += extra
                    report.planned = len(tasks)
                    printer.more(len(tasks))
                    phases(extra)
                    settle()
                    continue
                busy = store.claims([c.key for c in cells if c.run.adaptive], run_id)
                if not busy:
                    break
                held.update({f"{k}-r{r}": (Task(by_key[k], r), h) for (k, r), h in busy.items()})
                settle()
    except KeyboardInterrupt:
        report.interrupted = True
        store.finish_run(run_id, "interrupted")
        left = sum(1 for s in steps if s.submit_only for t in s.work.tasks
                   if t.id not in reported and t.cell.env_name not in running)
        printer.interrupted(run_id, sum(report.stored.values()), store.path, left)
        return report
    except BaseException:
        try:
            store.finish_run(run_id, "failed")  # a controller crash: the run says so; its results stay
        except StoreError:
            pass  # the store cannot take it (a full disk): the error being raised says what to do
        raise
    report.busy = {h.run_id: h for _, h in held.values()}
    report.deferred = len({t.id for t in deferred} - reported - gone - set(held))
    report.pending = len({t.id for t in tasks} - reported - gone - set(held) - {t.id for t in deferred})
    report.unsuccessful = _unsuccessful(cells, store)
    store.finish_run(run_id, "complete" if not report.pending else "submitted")
    printer.summary(cells, _cell_rows(cells, store), report, held)
    return report


def _collectable(tasks: Sequence[Task], store: Store) -> tuple[list[Task], list[Task]]:
    """`matrix collect`: the tasks of batch jobs submitted earlier and not yet gathered, and the rest
    (collect starts nothing: a local or docker repeat, or one never submitted, is left to `matrix run`)."""
    waiting = store.open_task_ids()
    take = [t for t in tasks if backends.get(t.cell.environment.backend).queued and t.id in waiting]
    chosen = {t.id for t in take}
    return take, [t for t in tasks if t.id not in chosen]


def _stored(cells: Sequence[Cell], store: Store) -> set[tuple[str, int]]:
    """The selected repeats stored with a final status."""
    most = {c.key: c.run.most_repeats for c in cells}
    return {(k, r) for (k, r), s in store.latest_statuses(most).items() if s.final and r < most[k]}


def _steps(tasks: Sequence[Task], ctx: RunContext, interleave: bool, wait: bool, submit: bool) -> list[Step]:
    """The run's steps: each round (one, unless interleaved) scheduled in turn."""
    queued = {t.cell.env_name for t in tasks if backends.get(t.cell.environment.backend).queued}
    return [step for part in rounds(tasks, interleave, queued)
            for step in schedule(_env_work(part, ctx), wait, submit)]


def _env_work(tasks: Sequence[Task], ctx: RunContext) -> list[EnvWork]:
    by_env: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_env[t.cell.env_name].append(t)
    work = []
    for env_tasks in by_env.values():
        env = env_tasks[0].cell.environment
        cls = backends.get(env.backend)
        work.append(EnvWork(tuple(env_tasks), cls.queued, cls.queued and cls(env, ctx).elsewhere()))
    return work


def _run_environment(tasks: Sequence[Task], ctx: RunContext, sink: Any, cannot_start: dict[str, str]) -> None:
    """One environment's tasks through its backend. An environment that cannot be used at all (its
    session could not open) measured nothing: its tasks are `not_started`, and the next run tries again.
    Within this run it is not tried again (`cannot_start` remembers why, for the later rounds)."""
    if not tasks:
        return
    env = tasks[0].cell.environment
    if env.name in cannot_start:
        now = time.time()
        for t in tasks:
            sink(t, Outcome(Status.NOT_STARTED, reason=cannot_start[env.name], started_at=now, finished_at=now))
        return
    told: set[str] = set()

    def once(task: Task, outcome: Outcome) -> None:
        told.add(task.id)
        sink(task, outcome)

    try:
        with backends.get(env.backend)(env, ctx) as backend:
            backend.run(tasks, once)
    except (StoreError, BusyError):
        raise  # the store, not the environment: the run stops and says what to do
    except MatrixError as e:
        cannot_start[env.name] = str(e)
        now = time.time()
        for t in tasks:
            if t.id not in told:
                sink(t, Outcome(Status.NOT_STARTED, reason=str(e), started_at=now, finished_at=now))


def _cell_rows(cells: Sequence[Cell], store: Store) -> list[dict[str, Any]]:
    keys = {c.key for c in cells}
    return [r for r in store.rows() if r["cell_key"] in keys]


def _unsuccessful(cells: Sequence[Cell], store: Store) -> Counter[str]:
    """The selected repeats whose current stored status is not a success (queued ones are not counted)."""
    repeats = {c.key: c.run.adaptive.max if c.run.adaptive else c.run.repeats for c in cells}
    current = store.latest_statuses(repeats)
    return Counter(s.value for (key, r), s in current.items() if not s.succeeded and r < repeats[key])
