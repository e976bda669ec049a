"""`matrix run`: decide what is missing, hand each environment's tasks to its backend, store every outcome.

Three parts: `todo` (which repeats to run) and `schedule` (in which order, and which environments are
only submitted first) are pure functions; `RunPrinter` says what happens; `run_matrix` wires them to the
backends and the store.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from runner import backends
from runner import console as consoles
from runner.decide import schedule as adaptive
from runner.errors import MatrixError
from runner.exitcodes import Exit
from runner.matrix import Matrix
from runner.report.fmt import Cell as TableCell
from runner.report.fmt import Table
from runner.results import RERUN_FAILED, Outcome, Status
from runner.spec import Cell, RunContext, Task
from runner.store import Store, new_run_id

# Exit statuses of `matrix run` and `matrix collect`: names kept for importers, values from runner/exitcodes.py.
EXIT_OK = Exit.OK
EXIT_ERROR = Exit.USAGE
EXIT_NOT_MEASURED = Exit.NOT_MEASURED
EXIT_REFERENCE_FAILED = Exit.REFERENCE_FAILED
EXIT_INTERRUPTED = Exit.INTERRUPTED


@dataclass
class RunReport:
    run_id: str | None
    planned: int = 0
    stored: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False
    pending: int = 0
    unsuccessful: Counter[str] = field(default_factory=Counter)  # current statuses of selected repeats, not ok

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        return EXIT_NOT_MEASURED if self.unsuccessful else EXIT_OK


def todo(cells: Sequence[Cell], store: Store, rerun_failed: bool = False, force: bool = False) -> list[Task]:
    """The repeats to run now: missing ones, interrupted or never started ones, and failed ones when asked."""
    current = store.latest_statuses(c.key for c in cells)
    tasks = []
    for cell in cells:
        for r in range(cell.run.repeats):
            status = current.get((cell.key, r))
            if force or status is None or not status.final or (rerun_failed and status in RERUN_FAILED):
                tasks.append(Task(cell, r))
    return tasks


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


# Saying what happens --------------------------------------------------------------------------------
def varying_params(cells: Sequence[Cell]) -> list[str]:
    """The axes whose value differs between the cells: the ones worth showing."""
    return [k for k in dict.fromkeys(k for c in cells for k in c.params)
            if len({str(c.params.get(k)) for c in cells}) > 1]


def fmt_rate(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def summary_table(cells: Sequence[Cell], rows: Sequence[dict[str, Any]]) -> Table:
    """One line per cell: statuses of its stored repeats and throughput mean ± std."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_key[row["cell_key"]].append(row)
    varying = varying_params(cells)
    table = Table(["environment", *varying, "repeats", "img/s (mean ± std)", "note"],
                  align=["l"] * (1 + len(varying)) + ["r", "r", "l"])
    for cell in cells:
        mine = by_key.get(cell.key, [])
        statuses = Counter(str(r["status"]) for r in mine)
        rates = [float(r["metrics"]["throughput"]) for r in mine
                 if r["status"] == Status.OK.value and isinstance(r["metrics"], dict)
                 and isinstance(r["metrics"].get("throughput"), int | float)]
        note = next((str(r["reason"]) for r in mine if r["status"] != Status.OK.value and r["reason"]), "")
        shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none"
        table.add(cell.env_name, *(str(cell.params.get(k, "")) for k in varying),
                  TableCell(shown, "" if set(statuses) <= {Status.OK.value} else "status"),
                  fmt_rate(rates), TableCell(_cut(note), "muted"))
    return table


class RunPrinter:
    """Everything `matrix run` says: the start line, a progress bar (or a line per repeat when not a
    terminal), each repeat that did not end ok (an environment that fails every repeat alike is said once,
    then counted), the interruption notice and the summary."""

    def __init__(self, out: Console, err: Console, cells: Sequence[Cell], verbose: bool = False) -> None:
        self.out, self.err = out, err
        self.varying = varying_params(cells)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err,
                                 transient=False, disable=not err.is_terminal and not verbose)
        self.bar = self.progress.add_task("starting", total=0)
        self.last_said: dict[str, str] = {}
        self.same_again: Counter[str] = Counter()

    def nothing_to_run(self, cells: Sequence[Cell], repeats: int | str, store: Path) -> None:
        self.out.print(f"Nothing to run: all {len(cells)} cells x {repeats} repeats are stored in {escape(str(store))}. "
                       "Use --rerun-failed or --force to measure again; `matrix show` lists them.")

    def started(self, run_id: str, n: int, total: int, store: Path) -> None:
        self.progress.update(self.bar, total=n)
        self.err.print(f"run [bold]{run_id}[/]: {n} of {total} repeats to run ({total - n} already stored) "
                       f"-> {escape(str(store))}")

    def task_started(self, task: Task) -> None:
        # Only what tells this cell apart, so the bar keeps its room on an 80-column terminal.
        shown = " ".join(f"{task.cell.params[k]}" for k in self.varying if k in task.cell.params)
        rule = task.cell.run.adaptive
        most = f"{rule.max} at most" if rule else str(task.cell.run.repeats)
        self.progress.update(self.bar, description=f"{escape(task.cell.env_name)} {escape(shown)} [dim]repeat "
                                                   f"{task.repeat + 1}/{most}[/]")

    def more(self, n: int) -> None:
        """Adaptive repeats added a round: the bar's total grows."""
        self.progress.update(self.bar, total=n)

    def outcome(self, task: Task, outcome: Outcome) -> None:
        self.progress.advance(self.bar)
        env_name, say = task.cell.env_name, self.progress.console.print
        if outcome.status is not Status.OK:
            said = f"{outcome.status.value}: {outcome.reason}"
            if self.last_said.get(env_name) == said:
                self.same_again[env_name] += 1
                return
            self.environment_done(env_name)
            self.last_said[env_name] = said
            say(f"[yellow]{outcome.status.value}[/] {escape(task.cell.label())} repeat {task.repeat + 1}: "
                f"{escape(outcome.reason)}")
            return
        self.environment_done(env_name)
        self.last_said.pop(env_name, None)
        if not self.progress.console.is_terminal:
            tput = outcome.metrics.get("throughput")
            say(f"ok {escape(task.cell.label())} repeat {task.repeat + 1}"
                + (f": {tput:.1f} img/s" if isinstance(tput, int | float) else ""))

    def environment_done(self, env_name: str) -> None:
        n = self.same_again.pop(env_name, 0)
        if n:
            self.progress.console.print(f"[yellow]{n} more repeat{'s' if n != 1 else ''}[/] of {escape(env_name)} ended "
                                        "the same way (`matrix show` lists them)")

    def interrupted(self, run_id: str, done: int, store: Path, left_queued: int) -> None:
        self.err.print(f"\n[bold]Interrupted.[/] {done} repeats of run {run_id} are stored in {escape(str(store))}; "
                       "run the same `matrix run` command again to measure only what is missing.")
        if left_queued:
            self.err.print(f"{left_queued} repeats this run submitted to a batch scheduler were not waited for "
                           "and keep running there; that command (or `matrix collect`) gathers them.")

    def summary(self, cells: Sequence[Cell], rows: Sequence[dict[str, Any]], report: RunReport) -> None:
        consoles.print_table(self.out, summary_table(cells, rows), "matrix run summary")
        if report.pending:
            self.out.print(f"{report.pending} repeats were submitted and are not finished yet: "
                           "`matrix collect` (same -m and --db) gathers them.")
        if report.unsuccessful:
            counts = ", ".join(f"{n} {s}" for s, n in sorted(report.unsuccessful.items()))
            self.out.print(f"Not measured: {counts} (`matrix show` has the reasons and log tails; "
                           "`matrix run --rerun-failed` tries them again).")


# Running --------------------------------------------------------------------------------------------
def run_matrix(matrix: Matrix, cells: Sequence[Cell], store: Store, *, workdir: Path,
               rerun_failed: bool = False, force: bool = False, wait: bool = True, submit: bool = True,
               argv: Sequence[str] = (), console: Console | None = None, verbose: bool = False) -> RunReport:
    printer = RunPrinter(console or consoles.stdout(), consoles.stderr(), cells, verbose)
    tasks = todo(cells, store, rerun_failed, force)
    if not tasks and not force:
        tasks = adaptive.more_tasks(cells, store)  # an adaptive cell whose interval is still too wide
    if not tasks:
        printer.nothing_to_run(cells, matrix.run.repeats_text, store.path)
        report = RunReport(None)
        report.unsuccessful = _unsuccessful(cells, store)
        return report
    run_id = new_run_id()
    store.start_run(run_id, str(matrix.path) if matrix.path else None, matrix.name, list(argv))
    report = RunReport(run_id, planned=len(tasks))
    printer.started(run_id, len(tasks), len(cells) * matrix.run.repeats, store.path)
    ctx = RunContext(run_id=run_id, workdir=workdir, wait=wait, submit=submit, verbose=verbose,
                     on_start=printer.task_started, store=store)
    reported: set[str] = set()

    def sink(task: Task, outcome: Outcome) -> None:
        store.add(run_id, task, outcome)
        reported.add(task.id)
        report.stored[outcome.status.value] += 1
        printer.outcome(task, outcome)

    cannot_start: dict[str, str] = {}  # environments whose session could not open, with why: not tried again
    running: list[str] = []  # the environment whose backend is running (it speaks for itself if interrupted)

    def drive(steps: Sequence[Step]) -> None:
        last_step = {s.work.tasks[0].cell.env_name: i for i, s in enumerate(steps)}
        for i, step in enumerate(steps):
            step_ctx = replace(ctx, wait=False, back_later=True) if step.submit_only else ctx
            env_name = step.work.tasks[0].cell.env_name
            running[:] = [env_name]
            _run_environment([t for t in step.work.tasks if t.id not in reported], step_ctx, sink, cannot_start)
            running.pop()
            if last_step[env_name] == i:
                printer.environment_done(env_name)

    steps = _steps(tasks, ctx, matrix.run.interleave, wait, submit)
    try:
        with printer.progress:
            drive(steps)
            # Adaptive repeats: rounds of more repeats for the cells whose interval is still too wide.
            while wait and submit:
                extra = adaptive.more_tasks(cells, store, run_id if force else None)
                if not extra or any(t.id in reported for t in extra):
                    break  # nothing more, or a repeat this run already ran would run again
                tasks += extra
                report.planned = len(tasks)
                printer.more(len(tasks))
                drive(_steps(extra, ctx, matrix.run.interleave, wait, submit))
    except KeyboardInterrupt:
        report.interrupted = True
        store.finish_run(run_id, "interrupted")
        left = sum(1 for s in steps if s.submit_only for t in s.work.tasks
                   if t.id not in reported and t.cell.env_name not in running)
        printer.interrupted(run_id, sum(report.stored.values()), store.path, left)
        return report
    except BaseException:
        store.finish_run(run_id, "failed")  # a controller crash: the run says so; its results stay
        raise
    report.pending = len(tasks) - len(reported)
    report.unsuccessful = _unsuccessful(cells, store)
    store.finish_run(run_id, "complete" if not report.pending else "submitted")
    printer.summary(cells, _cell_rows(cells, store), report)
    return report


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
