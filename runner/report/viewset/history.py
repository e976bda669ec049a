"""History: every cell measured more than once, with the significant steps between measurements."""

from __future__ import annotations

import pandas as pd

from runner import analysis as an
from runner.analysis.change import threshold_text
from runner.report.decisions import history_table
from runner.report.fmt import Section
from runner.report.viewkit import Built, Context, View


class HistoryView(View):
    name = "history"
    order = 40
    heading = "History"
    titled = False

    def build(self, ctx: Context) -> Built:
        return Built(self, history_sections(ctx.history), ctx.history)


def history_sections(hist: pd.DataFrame) -> list[Section]:
    """One table of every cell measured more than once (runner/analysis/history.py)."""
    if hist.empty:
        return []
    n_cells, n_steps = hist["cell_key"].nunique(), int(hist["step"].sum())
    note = (f"{n_cells} cell{'s' if n_cells != 1 else ''} measured more than once (a run resumed after an "
            "interruption is one measurement; a run that measures stored repeats again, as --force does, is "
            f"the next); {n_steps} significant step{'s' if n_steps != 1 else ''} (a change of at least "
            f"{threshold_text(an.MIN_EFFECT)} from the previous measurement with Welch's p < {an.ALPHA}, or a change in how "
            "the repeats ended, compared as rates). Every outcome is a point: a measurement whose repeats all "
            "failed or ran out of memory lists them under repeats and has no mean.")
    n_bounds = int((hist["boundary"].astype(str) != "").sum()) if "boundary" in hist else 0
    if n_bounds:
        note += (f" {n_bounds} boundar{'ies' if n_bounds != 1 else 'y'}: a name whose definition (run settings, image, "
                 "versions, device) changed from one measurement to the next; each definition on each machine is its "
                 "own series, and nothing is tested across a boundary.")
    return [Section("History", history_table(hist), note)]


