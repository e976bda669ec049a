"""What `matrix run` says while it runs (a RunListener, runner/execution/events.py): the start line, a progress bar or a line
per repeat, each repeat that did not end ok, the interruption notice, and the summary table per cell."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Collection, Sequence
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
from runner.analysis import definition, frame, shown_unit
from runner.base import console as consoles
from runner.base.table import Table, TableCell
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import RERUN_FAILED_TEXT, Outcome, Status
from runner.execution.events import Held, RunListener, RunReport
from runner.record.repeat import Repeat
from runner.record.stored import StoredRepeat
from runner.store import Holder


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


def throughput_unit(metrics: Any) -> str:
    """The unit a result gives its throughput (its metrics.definitions: tok/s for a transformer), else bench's."""
    return definition(metrics if isinstance(metrics, dict) else {}, "throughput")[1]


def _cut(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def summary_table(cells: Sequence[Cell], rows: Sequence[StoredRepeat], not_started: Collection[str] = ()) -> Table:
    """One line per cell: statuses of its stored repeats as admission sees them (runner/record/admission.py: a
    stored ok that diverged or measured a short window is counted so) and throughput mean ± std of the admitted;
    a cell of an environment in `not_started` (it could not start) with nothing stored says so."""
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    df = frame(rows)
    for rec in df.to_dict("records"):
        by_key[rec["cell_key"]].append(rec)
    varying = varying_params(cells)
    ok = df[df["status"] == Status.OK.value]
    unit = shown_unit(ok["unit_throughput"], "throughput")
    one_unit = None if " | " in unit else unit  # None: each value says its own
    table = Table(["environment", *varying, "repeats", f"{one_unit or 'throughput'} (mean ± std)", "note"],
                  align=["l"] * (1 + len(varying)) + ["r", "r", "l"])
    for cell in cells:
        mine = by_key.get(cell.key, [])
        statuses = Counter(str(r["status"]) for r in mine)
        good = [r for r in mine if r["status"] == Status.OK.value]
        rates = [float(r["throughput"]) for r in good if r["throughput"] == r["throughput"]]
        note = next((str(r["reason"]) for r in mine if r["status"] != Status.OK.value and r["reason"]), "")
        unsteady = sum(1 for r in good if r["steady"] is False)
        if unsteady and not note:
            note = f"{unsteady} warm-up{_s(unsteady)} not steady (stopped at a ceiling)"
        shown = (", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
                 or ("not started" if cell.env_name in not_started else "none"))
        rate = fmt_rate(rates)
        mine_units = {str(r["unit_throughput"]) for r in good}
        if one_unit is None and rates:
            rate += " " + "/".join(sorted(mine_units))
        worst = next((s for s in (Status.DIVERGED.value, Status.REFUSED.value) if s in statuses), "status")
        table.add(cell.env_name, *(str(cell.params.get(k, "")) for k in varying),
                  TableCell(shown, "" if statuses and set(statuses) <= {Status.OK.value} or shown == "none"
                            else worst),
                  rate, TableCell(_cut(note), "muted"))
    return table


class RunPrinter(RunListener):
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
        self.waited: set[str] = set()
        self.machine_waited: set[str] = set()
        self.taken: set[str] = set()
        self.not_started: Counter[str] = Counter()

    def watching(self) -> Progress:
        return self.progress

    def nothing_to_run(self, cells: Sequence[Cell], repeats: int | str, store: Path,
                       unsuccessful: Counter[str] | None = None) -> None:
        bad = ", ".join(f"{n} {s}" for s, n in sorted((unsuccessful or {}).items()))
        self.out.print(f"Nothing to run: all {len(cells)} cells x {repeats} repeats are stored in {escape(str(store))}"
                       + (f", {bad} (not measured: `matrix show` says why; --rerun-failed measures them again)"
                          if bad else "")
                       + ". Use --rerun-failed or --force to measure again; `matrix show` lists them.")

    def nothing_to_collect(self, store: Path) -> None:
        self.out.print(f"Nothing to collect: no batch job of these cells is waiting in {store}.")

    def left_out(self, tasks: Sequence[Task]) -> None:
        """`matrix collect` starts nothing: say what it leaves to `matrix run`."""
        here = [t for t in tasks if not backends.get(t.cell.environment.backend).queued]
        queued = [t for t in tasks if backends.get(t.cell.environment.backend).queued]
        if here:
            envs = ", ".join(dict.fromkeys(t.cell.env_name for t in here))
            self.err.print(f"collect starts nothing: {len(here)} repeat{_s(len(here))} of environments that run "
                           f"here ({escape(envs)}) {_are(len(here))} left to `matrix run`.")
        if queued:
            envs = ", ".join(dict.fromkeys(t.cell.env_name for t in queued))
            self.err.print(f"{len(queued)} repeat{_s(len(queued))} of batch environments ({escape(envs)}) "
                           f"{_are(len(queued))} not waiting as jobs (never submitted, or lost): `matrix run` "
                           "submits them.")

    def started(self, run_id: str, n: int, stored: int, again: int, store: Path, run: RunSettings | None = None,
                others: dict[tuple[str, int], Holder] | None = None,
                mine: Collection[tuple[str, int]] = ()) -> None:
        """`stored`: the selected repeats stored and not measured again; `again`: the stored ones this run
        measures again (--rerun-failed, --force)."""
        self.progress.update(self.bar, total=n)
        kept = f"{stored} already stored" + (f", {again} measured again" if again else "")
        if run is not None and run.adaptive:
            a = run.adaptive
            why = ("a check of the file's gate or references is undecided" if a.until == "decided" else
                   f"a cell's 95% interval is wider than ±{a.target_ci * 100:g}%")
            said = f"{n} repeat{_s(n)} to run now ({kept}; more while {why}, at most {a.max} per cell)"
        else:
            said = f"{n} of {n + stored} repeats to run ({kept})"
        self.err.print(f"run [bold]{run_id}[/]: {said} -> {escape(str(store))}")
        by_run: dict[str, list[Holder]] = defaultdict(list)
        for repeat, h in (others or {}).items():
            if repeat in mine:
                by_run[h.run_id].append(h)
        for hs in by_run.values():
            self.err.print(f"{len(hs)} of them {_are(len(hs))} being measured by {escape(hs[0].describe())}: this "
                           "run measures the others and then waits for those.")

    def waiting(self, held: Held) -> None:
        """Said once per holder: this run waits for the repeats another live run holds."""
        by_run: dict[str, list[Holder]] = defaultdict(list)
        for _, h in held.values():
            by_run[h.run_id].append(h)
        for run_id, hs in by_run.items():
            if run_id not in self.waited:
                self.waited.add(run_id)
                self.progress.console.print(f"waiting for {len(hs)} repeat{_s(len(hs))} that "
                                            f"{escape(hs[0].describe())} is measuring")

    def machine_busy(self, h: Holder) -> None:
        """Said once per run: this machine measures one repeat at a time, so this run waits for its turn."""
        if h.run_id not in self.machine_waited:
            self.machine_waited.add(h.run_id)
            self.progress.console.print(f"{escape(h.describe())} is measuring on this machine: the two runs take "
                                        "turns, so that no measurement shares the processors with another")

    def taken_over(self, h: Holder) -> None:
        if h.run_id not in self.taken:
            self.taken.add(h.run_id)
            self.progress.console.print(f"[yellow]{escape(h.describe())} ended without storing its repeats[/]: "
                                        "this run measures them")

    def elsewhere_done(self, task: Task) -> None:
        """A repeat another run stored meanwhile: not measured again; the bar counts it."""
        self.progress.advance(self.bar)

    def not_stored(self, task: Task, outcome: Outcome) -> None:
        self.progress.advance(self.bar)
        if outcome.status is Status.OK:
            self.progress.console.print(f"[yellow]not stored[/] {escape(task.cell.label())} repeat {task.repeat + 1}: "
                                        "another run stored this repeat meanwhile (one result per repeat)")

    def cannot_start(self, env_name: str, reason: str, tasks: Sequence[Task]) -> None:
        """Said once per environment, in one line: why it could not start and how many repeats it leaves."""
        self.progress.advance(self.bar, len(tasks))
        n = len(tasks)
        if env_name not in self.not_started:
            self.progress.console.print(
                f"[{consoles.status_style(Status.NOT_STARTED.value)}]not started[/] {escape(env_name)}: "
                f"{escape(reason.rstrip('.'))}; {n} repeat{_s(n)} not run, nothing stored (`matrix run` tries "
                f"{'it' if n == 1 else 'them'} again)", soft_wrap=True)
        self.not_started[env_name] += n

    def task_started(self, task: Task) -> None:
        # Only what tells this cell apart, so the bar keeps its room on an 80-column terminal; a number or a switch
        # named by its axis (`batch_size=32`), a name as it is (`mnist_cnn bf16`: it says what it is).
        shown = " ".join(f"{v}" if isinstance(v, str) else f"{k}={v}"
                         for k in self.varying if k in task.cell.params for v in (task.cell.params[k],))
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
        status, reason = admitted(task, outcome)
        if status != Status.OK.value:
            said = f"{status}: {reason}"
            if self.last_said.get(env_name) == said:
                self.same_again[env_name] += 1
                return
            self.environment_done(env_name)
            self.last_said[env_name] = said
            style = consoles.status_style(status)
            say(f"[{style}]{status}[/] {escape(task.cell.label())} repeat {task.repeat + 1}: {escape(reason)}")
            return
        self.environment_done(env_name)
        self.last_said.pop(env_name, None)
        if not self.progress.console.is_terminal:
            tput = outcome.metrics.get("throughput")
            say(f"ok {escape(task.cell.label())} repeat {task.repeat + 1}"
                + (f": {tput:.1f} {throughput_unit(outcome.metrics)}" if isinstance(tput, int | float) else ""))

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

    def summary(self, cells: Sequence[Cell], rows: Sequence[StoredRepeat], report: RunReport,
                held: Held | None = None) -> None:
        consoles.print_table(self.out, summary_table(cells, rows, report.not_started), "matrix run summary")
        if report.pending:
            self.out.print(f"{report.pending} repeats were submitted and are not finished yet: "
                           "`matrix collect` (same -m and --db) gathers them.")
        if report.deferred:
            self.out.print(f"{report.deferred} repeat{_s(report.deferred)} of cells with `iterations: auto` {_are(report.deferred)} "
                           "not started: each waits for its cell's first repeat to choose the window; `matrix run` "
                           "(same -m and --db) runs them once it is stored.")
        by_run = Counter(h.run_id for _, h in (held or {}).values())
        for run_id, n in by_run.items():
            self.out.print(f"{n} repeat{_s(n)} {_are(n)} being measured by {escape(report.busy[run_id].describe())}; "
                           "this command did not wait for them (exit status 7): `matrix run` without --no-wait does.")
        for env_name, n in report.not_started.items():
            self.out.print(f"Not started: {n} repeat{_s(n)} of {escape(env_name)}, which could not start "
                           f"({escape(_cut(report.cannot_start.get(env_name, ''), 90))}); nothing was stored for "
                           f"{'it' if n == 1 else 'them'}, so the run is incomplete: the next `matrix run` tries "
                           f"{'it' if n == 1 else 'them'} again.", soft_wrap=True)
        if report.unsuccessful:
            counts = ", ".join(f"{n} {s}" for s, n in sorted(report.unsuccessful.items()))
            self.out.print(f"Not measured: {counts} (`matrix show` has the reasons and log tails; "
                           f"`matrix run --rerun-failed` runs {RERUN_FAILED_TEXT} repeats again, and a plain "
                           "`matrix run` the cancelled and not started ones).")


def admitted(task: Task, outcome: Outcome) -> tuple[str, str]:
    """(status, reason) of a repeat as admission sees it (runner/record/admission.py): an `ok` whose training went
    NaN is diverged, one whose window came out short of the promise is refused; what the store keeps is unchanged."""
    if outcome.status is not Status.OK:
        return outcome.status.value, outcome.reason
    rep = Repeat.of(StoredRepeat.measured(task, outcome))
    return rep.status, rep.reason


def _s(n: int) -> str:
    return "" if n == 1 else "s"


def _are(n: int) -> str:
    return "is" if n == 1 else "are"
