"""`matrix show`: the repeats of one run with their statuses and headline figure."""

from __future__ import annotations

from pathlib import Path

from runner.base import console as consoles
from runner.base.table import Table, TableCell
from runner.commands.base import Command, register
from runner.domain.defaults import shown_params
from runner.record.metrics import HEADLINE, definition, shown_unit
from runner.record.repeat import Repeat, admitted


def show_run(run_ref: str | None, db: Path) -> int:
    """`matrix show`: one row per stored repeat of the run, as admission sees it."""
    from runner.store import Store
    with Store(db, readonly=True) as store:
        run_id = store.resolve_run(run_ref)
        rows = admitted(store.rows([run_id], latest_only=False))  # a stored ok may be diverged or refused
        status = next(r.status for r in store.runs() if r.run_id == run_id)
    if not rows:  # every environment it planned could not start, or it was stopped before its first repeat ended
        consoles.stdout().print(f"run {run_id} ({status}) stored no repeat: nothing of it ended (`matrix run` "
                                "measures what is missing)", soft_wrap=True, markup=False)
        return 0
    axes = list(dict.fromkeys(k for r in rows for k in shown_params(r.params)))
    unit = shown_unit((definition(r.metrics, HEADLINE)[1] for r in rows if r.ok), HEADLINE)
    one_unit = None if " | " in unit else unit  # None: each value says its own
    table = Table(["cell", "environment", *axes, "repeat", "status", one_unit or HEADLINE, "note"],
                  align=["l"] * (2 + len(axes)) + ["r", "l", "r"])
    for r in rows:
        tput = r.metrics.get(HEADLINE)
        shown = f"{tput:.1f}" if isinstance(tput, int | float) else "-"
        if one_unit is None and isinstance(tput, int | float):
            shown += " " + definition(r.metrics, HEADLINE)[1]
        table.add(r.cell_key, r.environment, *(str(r.params.get(a, "")) for a in axes),
                  str(r.number + 1), TableCell(r.status, "" if r.ok else (
                      r.status if r.status in ("diverged", "refused") else "status")),
                  shown, note(r))
    consoles.print_table(consoles.stdout(), table, f"run {run_id}: {len(rows)} repeats")
    return 0


def note(row: Repeat) -> TableCell:
    """`matrix show`'s note: why a repeat did not end ok, whether the GPU throttled in its window, or that its
    warm-up reached a ceiling before it was steady (flagged as a noisy cell is in the report)."""
    metrics = row.metrics
    notes = []
    telemetry = metrics.get("telemetry")
    if isinstance(telemetry, dict) and telemetry.get("throttled") is True:
        notes.append("throttled: " + str(telemetry.get("throttle_reason") or ""))
    if not row.ok:
        notes.append(row.reason)
    else:
        warm = metrics.get("warmup")
        if isinstance(warm, dict) and warm.get("steady") is False:
            notes.append(f"warm-up not steady: stopped at its {'time ' if warm.get('how') == 'max_time' else ''}"
                         f"ceiling after {warm.get('iterations')} iteration{'' if warm.get('iterations') == 1 else 's'}")
    text = "; ".join(n for n in notes if n)[:70]
    return TableCell(text, "status" if notes and row.ok else "muted")


@register
class ShowCommand(Command):
    name = "show"
    help = f"The cells of one run with their statuses and {HEADLINE}."

    def run(self, run_ref: str | None, db: Path) -> int:
        return show_run(run_ref, db)
