"""`matrix run`: decide what is missing, hand each environment's tasks to its backend, store every outcome."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

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
from rich.table import Table

from runner import backends
from runner.backends.base import Backend
from runner.errors import MatrixError
from runner.matrix import Matrix
from runner.results import RERUN_FAILED, Outcome, Status
from runner.spec import Cell, RunContext, Task
from runner.store import Store, new_run_id


@dataclass
class RunReport:
    run_id: str | None
    planned: int = 0
    stored: Counter[str] = field(default_factory=Counter)
    interrupted: bool = False
    pending: int = 0


def todo(cells: Sequence[Cell], store: Store, rerun_failed: bool = False, force: bool = False) -> list[Task]:
    """The repeats to run now: missing ones, interrupted ones, and failed ones when asked."""
    current = store.latest_statuses(c.key for c in cells)
    tasks = []
    for cell in cells:
        for r in range(cell.run.repeats):
            status = current.get((cell.key, r))
            if force or status is None or not status.final or (rerun_failed and status in RERUN_FAILED):
                tasks.append(Task(cell, r))
    return tasks


def run_matrix(matrix: Matrix, cells: Sequence[Cell], store: Store, *, workdir: Path,
               rerun_failed: bool = False, force: bool = False, wait: bool = True, submit: bool = True,
               argv: Sequence[str] = (), console: Console | None = None, verbose: bool = False) -> RunReport:
    out = console or Console()
    err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
    tasks = todo(cells, store, rerun_failed, force)
    total = len(cells) * matrix.run.repeats
    if not tasks:
        out.print(f"Nothing to run: all {len(cells)} cells x {matrix.run.repeats} repeats are stored in "
                  f"{store.path}. Use --rerun-failed or --force to measure again; `matrix show` lists them.")
        return RunReport(None)
    run_id = new_run_id()
    store.start_run(run_id, str(matrix.path) if matrix.path else None, matrix.name, list(argv))
    report = RunReport(run_id, planned=len(tasks))
    err.print(f"run [bold]{run_id}[/]: {len(tasks)} of {total} repeats to run "
              f"({total - len(tasks)} already stored) -> {store.path}")
    ctx = RunContext(run_id=run_id, workdir=workdir, wait=wait, submit=submit, verbose=verbose, store=store)
    by_env: dict[str, list[Task]] = defaultdict(list)
    for t in tasks:
        by_env[t.cell.env_name].append(t)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=err,
                        transient=False, disable=not err.is_terminal and not verbose)
    bar = progress.add_task("starting", total=len(tasks))
    reported: set[str] = set()

    varying = varying_params(cells)

    def on_start(task: Task) -> None:
        # Only what tells this cell apart, so the bar keeps its room on an 80-column terminal.
        shown = " ".join(f"{task.cell.params[k]}" for k in varying if k in task.cell.params)
        progress.update(bar, description=f"{task.cell.env_name} {shown} [dim]repeat {task.repeat + 1}/"
                                         f"{task.cell.run.repeats}[/]")

    # An environment that cannot run at all fails every repeat the same way: say it once, then count.
    last_said: dict[str, str] = {}
    same_again: Counter[str] = Counter()

    def say_same_again(env_name: str) -> None:
        n = same_again.pop(env_name, 0)
        if n:
            progress.console.print(f"[yellow]{n} more repeat{'s' if n != 1 else ''}[/] of {env_name} ended the "
                                   "same way (`matrix show` lists them)")

    def sink(task: Task, outcome: Outcome) -> None:
        store.add(run_id, task, outcome)
        reported.add(task.id)
        report.stored[outcome.status.value] += 1
        progress.advance(bar)
        env_name = task.cell.env_name
        if outcome.status is not Status.OK:
            said = f"{outcome.status.value}: {outcome.reason}"
            if last_said.get(env_name) == said:
                same_again[env_name] += 1
                return
            say_same_again(env_name)
            last_said[env_name] = said
            progress.console.print(f"[yellow]{outcome.status.value}[/] {task.cell.label()} repeat "
                                   f"{task.repeat + 1}: {escape(outcome.reason)}")
            return
        say_same_again(env_name)
        last_said.pop(env_name, None)
        if not progress.console.is_terminal:
            tput = outcome.metrics.get("throughput")
            progress.console.print(f"ok {task.cell.label()} repeat {task.repeat + 1}"
                                   + (f": {tput:.1f} img/s" if isinstance(tput, (int, float)) else ""))

    ctx.on_start = on_start

    current: list[str] = []  # the environment whose backend is running (it speaks for itself if interrupted)

    def run_env(env_tasks: list[Task], env_ctx: RunContext) -> None:
        pending = [t for t in env_tasks if t.id not in reported]
        if not pending:
            return
        env = pending[0].cell.environment
        current[:] = [env.name]
        try:
            with backends.get(env.backend)(env, env_ctx) as backend:
                backend.run(pending, sink)
        except MatrixError as e:
            # The environment cannot be used at all: nothing was measured, the next run tries again.
            now = time.time()
            for t in pending:
                if t.id not in reported:
                    sink(t, Outcome(Status.NOT_STARTED, reason=str(e), started_at=now, finished_at=now))
        finally:
            say_same_again(env.name)
        current.clear()  # reached only when the backend returned: an interrupt leaves its name here

    # Batch-scheduled environments are submitted first, so all their jobs wait in the scheduler's queue
    # together. When those jobs surely run on other machines, the other environments run here meanwhile
    # and the run collects the jobs last; when they may share this host, the run waits for them first,
    # so no measurement overlaps another.
    def backend_class(ts: list[Task]) -> type[Backend]:
        return backends.get(ts[0].cell.environment.backend)

    def elsewhere(ts: list[Task]) -> bool:
        return backend_class(ts)(ts[0].cell.environment, ctx).elsewhere()

    groups = list(by_env.values())
    queued = [ts for ts in groups if backend_class(ts).queued]
    others = [ts for ts in groups if not backend_class(ts).queued]
    early = queued if ctx.wait and ctx.submit and queued and len(groups) > 1 else []
    if early:
        groups = others + queued if all(elsewhere(ts) for ts in early) else queued + others
    try:
        with progress:
            for env_tasks in early:
                run_env(env_tasks, replace(ctx, wait=False, back_later=True))
            for env_tasks in groups:
                run_env(env_tasks, ctx)
    except KeyboardInterrupt:
        report.interrupted = True
        store.finish_run(run_id, "interrupted")
        done = sum(report.stored.values())
        err.print(f"\n[bold]Interrupted.[/] {done} repeats of run {run_id} are stored in {store.path}; "
                  "run the same `matrix run` command again to measure only what is missing.")
        left = sum(1 for ts in early for t in ts if t.id not in reported and t.cell.env_name not in current)
        if left:
            err.print(f"{left} repeats this run submitted to a batch scheduler were not waited for and keep "
                      "running there; that command (or `matrix collect`) gathers them.")
        return report
    report.pending = len(tasks) - len(reported)
    store.finish_run(run_id, "complete" if not report.pending else "submitted")
    print_summary(out, cells, store)
    if report.pending:
        out.print(f"{report.pending} repeats were submitted and are not finished yet: "
                  "`matrix collect` (same -m and --db) gathers them.")
    return report


def fmt_rate(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.1f}"
    return f"{statistics.fmean(values):.1f} ± {statistics.stdev(values):.1f}"


def varying_params(cells: Sequence[Cell]) -> list[str]:
    """The axes whose value differs between the cells: the ones worth showing."""
    return [k for k in dict.fromkeys(k for c in cells for k in c.params)
            if len({str(c.params.get(k)) for c in cells}) > 1]


def print_summary(out: Console, cells: Sequence[Cell], store: Store) -> None:
    """One line per cell: statuses of its stored repeats and throughput mean ± std."""
    rows_by_key: dict[str, list[dict[str, object]]] = defaultdict(list)
    keys = {c.key for c in cells}
    for row in store.rows():
        if row["cell_key"] in keys:
            rows_by_key[row["cell_key"]].append(row)
    varying = varying_params(cells)
    table = Table(title="matrix run summary", show_lines=False)
    for col in ("environment", *varying, "repeats", "img/s (mean ± std)", "note"):
        table.add_column(col, justify="right" if col.startswith(("img", "rep")) else "left")
    for cell in cells:
        rows = rows_by_key.get(cell.key, [])
        statuses = Counter(str(r["status"]) for r in rows)
        rates = [float(r["metrics"]["throughput"]) for r in rows  # type: ignore[index]
                 if r["status"] == "ok" and isinstance(r["metrics"], dict)
                 and isinstance(r["metrics"].get("throughput"), (int, float))]
        note = next((str(r["reason"]) for r in rows if r["status"] != "ok" and r["reason"]), "")
        shown = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none"
        table.add_row(cell.env_name, *(str(cell.params.get(k, "")) for k in varying), shown,
                      fmt_rate(rates), note if len(note) <= 60 else note[:59].rstrip() + "…")
    out.print(table)


def stdout_console() -> Console:
    return Console(file=sys.stdout, width=160 if not sys.stdout.isatty() else None)
