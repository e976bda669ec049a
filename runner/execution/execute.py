"""`matrix run`: decide what is missing, hand each environment's tasks to its backend, store every outcome.

Three parts: which repeats to run and in which order (runner/execution/order.py, pure functions); a `RunListener`
(runner/execution/events.py; the printer of runner/execution/printer.py is one) told what happens; and `Run`, one run's state,
which wires them to the backends and the store.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from runner import backends
from runner.analysis import frame
from runner.backends.context import RunContext
from runner.base import console as consoles
from runner.base.errors import BusyError, MatrixError, StoreError
from runner.base.exitcodes import Exit
from runner.domain.cells import Cell, Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import adaptive_rounds as adaptive
from runner.execution import decided_rounds
from runner.execution.events import Held, RunListener, RunReport
from runner.execution.order import EnvWork, Step, Want, calibration_phase, rounds, schedule, todo, want_for
from runner.execution.printer import RunPrinter
from runner.matrix import Matrix
from runner.record.stored import StoredRepeat
from runner.store import RunClaims, Store, new_run_id, run_status

# Exit statuses of `matrix run` and `matrix collect` (runner/base/exitcodes.py has the one table).
EXIT_OK = Exit.OK                    # every selected repeat is ok or unsupported (or still queued with --no-wait)
EXIT_ERROR = Exit.USAGE              # nothing ran: bad matrix file or option (one line on stderr)
EXIT_NOT_MEASURED = Exit.NOT_MEASURED  # some repeat ended failed, oom, diverged, timeout, cancelled or not_started
EXIT_REFERENCE_FAILED = Exit.REFERENCE_FAILED  # everything was measured, but a reference in the matrix file failed
EXIT_BUSY = Exit.BUSY                # --no-wait or collect: another live run holds some of the selected repeats
EXIT_INTERRUPTED = Exit.INTERRUPTED

__all__ = ["EnvWork", "RunReport", "Step", "Want", "calibration_phase", "rounds", "run_matrix", "schedule", "todo"]


def run_matrix(matrix: Matrix, cells: Sequence[Cell], store: Store, *, workdir: Path,
               rerun_failed: bool = False, force: bool = False, wait: bool = True, submit: bool = True,
               argv: Sequence[str] = (), console: Console | None = None, verbose: bool = False,
               poll_s: float = 2.0, listener: RunListener | None = None) -> RunReport:
    """Measure what the selected cells still need and store it. Every repeat is claimed in the store before
    it runs, so runs that share the store share the work: a repeat another live run holds is waited for
    (taken over if that run dies); `--no-wait` and `matrix collect` do not wait and exit 7 (busy) instead.
    `submit` False (`matrix collect`) only gathers batch jobs submitted earlier; it starts nothing.
    `listener`: told what happens (by default the printer, on `console` and stderr)."""
    if listener is None:

        listener = RunPrinter(console or consoles.stdout(), consoles.stderr(), cells, verbose)
    want = want_for(cells, store, rerun_failed, force)
    tasks = todo(cells, store, want=want)
    if not submit:
        tasks, left_out = _collectable(tasks, store)
        listener.left_out(left_out)
    elif not tasks and not force:
        # an adaptive cell whose interval is still too wide, or whose check is still undecided
        tasks = _more(adaptive.more_tasks(cells, store), decided_rounds.more_tasks(matrix, cells, store))
    if not tasks and not (wait and submit and store.claims({c.key for c in cells})):
        report = RunReport(None)
        report.unsuccessful = _unsuccessful(cells, store)
        if submit:
            listener.nothing_to_run(cells, matrix.run.repeats_text, store.path, report.unsuccessful)
        else:
            listener.nothing_to_collect(store.path)
        return report
    run = Run(matrix, cells, store, listener, want, workdir=workdir, wait=wait, submit=submit, verbose=verbose,
              poll_s=poll_s)
    return run.execute(tasks, argv)


class Run:
    """One run's state while it measures: which of its tasks are stored (`reported`), stored elsewhere or no
    longer needed (`gone`), held by another live run (`held`), or deferred until their cell has calibrated. The
    claim protocol is the store's (`claims`, from `Store.begin_run`): take, record, held, calibrated, end."""

    claims: RunClaims

    def __init__(self, matrix: Matrix, cells: Sequence[Cell], store: Store, listener: RunListener, want: Want, *,
                 workdir: Path, wait: bool, submit: bool, verbose: bool, poll_s: float) -> None:
        self.matrix, self.cells, self.store, self.listener, self.want = matrix, cells, store, listener, want
        self.wait, self.submit, self.poll_s = wait, submit, poll_s
        self.run_id = new_run_id()
        self.report = RunReport(self.run_id)
        self.reported: set[str] = set()   # stored by this run
        self.gone: set[str] = set()       # stored by another run meanwhile, or no longer needed
        self.held: Held = {}              # held by another live run
        self.deferred: list[Task] = []    # later repeats of auto cells whose calibrating repeat is not stored yet
        self.cannot_start: dict[str, str] = {}  # environments whose session could not open, with why
        self.skipped: set[str] = set()    # tasks of those: not started, nothing stored
        self.running: list[str] = []      # the environment whose backend runs (it speaks for itself if interrupted)
        self.ctx = RunContext(run_id=self.run_id, workdir=workdir, wait=wait, submit=submit, verbose=verbose,
                              on_start=listener.task_started, store=store,
                              claim=lambda task: bool(self.claim([task], here=True)), prepare=self.prepare)

    @property
    def waits(self) -> bool:
        return self.wait and self.submit

    def _settled(self, t: Task) -> bool:
        return t.id in self.reported or t.id in self.gone or t.id in self.skipped

    # the run, start to end ----------------------------------------------------------------------------
    def execute(self, tasks: list[Task], argv: Sequence[str]) -> RunReport:
        store, report = self.store, self.report
        final = _stored(self.cells, store)
        again = len(final & {(t.cell.key, t.repeat) for t in tasks})  # --rerun-failed, --force: measured again
        self.claims = store.begin_run(self.run_id, str(self.matrix.path) if self.matrix.path else None,
                                      self.matrix.name, list(argv), self.want.needs, poll_s=self.poll_s,
                                      on_machine_busy=self.listener.machine_busy)
        report.planned = len(tasks)
        self.listener.started(self.run_id, len(tasks), len(final) - again, again, store.path, self.matrix.run,
                              self.claims.held({c.key for c in self.cells}), {(t.cell.key, t.repeat) for t in tasks})
        steps = _steps(tasks, self.ctx, self.matrix.run.interleave, self.wait, self.submit)
        try:
            with self.listener.watching():
                self.measure(tasks)
        except KeyboardInterrupt:
            report.interrupted = True
            self.claims.end("interrupted")
            left = sum(1 for s in steps if s.submit_only for t in s.work.tasks
                       if t.id not in self.reported and t.cell.env_name not in self.running)
            self.listener.interrupted(self.run_id, sum(report.stored.values()), store.path, left)
            return report
        except BaseException:
            self.claims.abandon()  # a controller crash: the run says so; its results stay
            raise
        return self.finish(tasks)

    def measure(self, tasks: list[Task]) -> None:
        """Every task, the repeats other runs hold, the deferred ones, then the adaptive rounds."""
        self.phases(tasks)
        self.settle()
        while self.deferred and self.waits:
            retry = list(self.deferred)
            self.deferred.clear()
            self.phases(retry)
            self.settle()
        # Adaptive repeats: rounds of more repeats for the cells whose interval is still too wide; and
        # what other runs add to these cells is waited for before deciding again.
        by_key = {c.key: c for c in self.cells}
        force = self.want.force
        while self.waits:
            since = self.run_id if force else None
            extra = [t for t in _more(adaptive.more_tasks(self.cells, self.store, since),
                                      decided_rounds.more_tasks(self.matrix, self.cells, self.store, since))
                     if not self._settled(t)]
            if extra:
                tasks += extra
                self.report.planned = len(tasks)
                self.listener.more(len(tasks))
                self.phases(extra)
                self.settle()
                continue
            busy = self.claims.held([c.key for c in self.cells if c.run.adaptive])
            if not busy:
                break
            self.held.update({f"{k}-r{r}": (Task(by_key[k], r), h) for (k, r), h in busy.items()})
            self.settle()

    def finish(self, tasks: list[Task]) -> RunReport:
        report, held = self.report, set(self.held)
        settled = self.reported | self.gone
        report.busy = {h.run_id: h for _, h in self.held.values()}
        report.deferred = len({t.id for t in self.deferred} - settled - held)
        report.pending = len({t.id for t in tasks} - settled - held - {t.id for t in self.deferred} - self.skipped)
        report.unsuccessful = _unsuccessful(self.cells, self.store)
        self.claims.end(run_status("submitted" if report.pending else "complete", report.stored,
                                   left=len(self.skipped) + report.deferred))
        self.listener.summary(self.cells, _cell_rows(self.cells, self.store), report, self.held)
        return report

    # claims and results ----------------------------------------------------------------------------
    def claim(self, some: Sequence[Task], here: bool = False) -> list[Task]:
        """The tasks of `some` this run may measure now; the others are held elsewhere or gone."""
        taken = self.claims.take(some, here)
        for dead in taken.taken_over:
            self.listener.taken_over(dead)
        for t in taken.mine:
            self.held.pop(t.id, None)
        self.held.update(taken.held)
        for t in taken.gone:
            self.held.pop(t.id, None)
            if t.id not in self.gone:
                self.gone.add(t.id)
                self.listener.elsewhere_done(t)
        return taken.mine

    def sink(self, task: Task, outcome: Outcome) -> None:
        left = self.report.planned - len(self.reported) - len(self.gone) - len(self.skipped) - 1
        if self.claims.record(task, outcome, remaining=max(left, 0)):
            self.reported.add(task.id)
            self.report.stored[outcome.status.value] += 1
            self.listener.outcome(task, outcome)
        elif task.id not in self.gone:
            self.gone.add(task.id)
            self.listener.not_stored(task, outcome)

    def skip(self, tasks: Sequence[Task], reason: str) -> None:
        """Tasks whose environment could not start: nothing was tried, so nothing is stored (a stored row would read
        as a repeat that ended); their claims are given back, the report counts them, the next run tries them."""
        fresh = [t for t in tasks if t.id not in self.skipped]
        if not fresh:
            return
        env_name = fresh[0].cell.env_name
        self.skipped.update(t.id for t in fresh)
        self.report.not_started[env_name] += len(fresh)
        self.report.cannot_start.setdefault(env_name, reason)
        self.claims.release(fresh)
        self.listener.cannot_start(env_name, reason, fresh)

    def prepare(self, task: Task) -> Task:
        """The task as it runs: with its cell's calibrated count (iterations: auto), when one is stored."""
        if not task.cell.run.calibrated:
            return task
        return replace(task, iterations=self.claims.calibrated([task.cell.key]).get(task.cell.key))

    # steps ------------------------------------------------------------------------------------------------
    def drive(self, steps: Sequence[Step]) -> None:
        last_step = {s.work.tasks[0].cell.env_name: i for i, s in enumerate(steps)}
        for i, step in enumerate(steps):
            step_ctx = replace(self.ctx, wait=False, back_later=True) if step.submit_only else self.ctx
            env_name = step.work.tasks[0].cell.env_name
            mine = [self.prepare(t) for t in step.work.tasks if not self._settled(t)]
            if backends.get(step.work.tasks[0].cell.environment.backend).claims_each_task:
                # It claims each task as it starts it; leave out now what another run holds (no session for it).
                others = self.claims.held({t.cell.key for t in mine})
                for t in mine:
                    if (t.cell.key, t.repeat) in others:
                        self.held[t.id] = (t, others[(t.cell.key, t.repeat)])
                mine = [t for t in mine if t.id not in self.held]
            else:
                mine = self.claim(mine)
            self.running[:] = [env_name]
            _run_environment(mine, step_ctx, self.sink, self.skip, self.cannot_start)
            self.running.pop()
            if last_step[env_name] == i:
                self.listener.environment_done(env_name)

    def settle(self) -> None:
        """Wait for the repeats other live runs hold; run those whose holder died without storing them."""
        held = self.held
        while held and self.waits:
            self.listener.waiting(held)
            time.sleep(self.poll_s)
            live = self.claims.held({t.cell.key for t, _ in held.values()})
            free = [t for t, _ in held.values() if (t.cell.key, t.repeat) not in live]
            for t, _ in list(held.values()):
                if (t.cell.key, t.repeat) in live:
                    held[t.id] = (t, live[(t.cell.key, t.repeat)])
            for t in free:
                held.pop(t.id)  # stored by its holder meanwhile, or its holder died: claim() tells
            if free:
                self.phases(free)

    def phases(self, some: Sequence[Task]) -> None:
        """Run tasks, an auto cell's calibrating repeat before its others (calibration_phase); the others of a cell
        whose calibrating repeat ended without being stored here (held by another run, or submitted and not
        waited for) are deferred."""
        pending = list(some)
        while pending:
            known = self.claims.calibrated({t.cell.key for t in pending if t.cell.run.calibrated})
            now, later = calibration_phase(pending, known)
            self.drive(_steps(now, self.ctx, self.matrix.run.interleave, self.wait, self.submit))
            unresolved = {t.cell.key for t in now if t.cell.run.calibrated and t.cell.key not in known
                          and not self._settled(t)}
            self.deferred.extend(t for t in later if t.cell.key in unresolved)
            pending = [t for t in later if t.cell.key not in unresolved]


def _more(*lists: Sequence[Task]) -> list[Task]:
    """The tasks of several rounds' rules, each repeat once."""
    return list({t.id: t for ts in lists for t in ts}.values())


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


def _run_environment(tasks: Sequence[Task], ctx: RunContext, sink: Callable[[Task, Outcome], None],
                     skip: Callable[[Sequence[Task], str], None], cannot_start: dict[str, str]) -> None:
    """One environment's tasks through its backend. An environment that cannot be used at all (its session could
    not open: an image that cannot be had, an engine that is down) measured nothing: its tasks are skipped, nothing
    is stored, and the next run tries again. Within this run it is not tried again (`cannot_start` remembers why,
    for the later rounds)."""
    if not tasks:
        return
    env = tasks[0].cell.environment
    if env.name in cannot_start:
        skip(tasks, cannot_start[env.name])
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
        skip([t for t in tasks if t.id not in told], str(e))


def _cell_rows(cells: Sequence[Cell], store: Store) -> list[StoredRepeat]:
    keys = {c.key for c in cells}
    return [r for r in store.rows() if r.cell_key in keys]


def _unsuccessful(cells: Sequence[Cell], store: Store) -> Counter[str]:
    """The selected repeats whose current status, as admission sees it (a stored ok may be diverged or refused), is
    not a success (queued ones are not counted)."""
    repeats = {c.key: c.run.adaptive.max if c.run.adaptive else c.run.repeats for c in cells}
    df = frame(store.rows(keys=list(repeats)))
    return Counter(s for key, r, s in zip(df["cell_key"], df["repeat"], df["status"], strict=True)
                   if not Status(s).succeeded and r < repeats[key])
