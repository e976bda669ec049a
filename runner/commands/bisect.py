"""`matrix bisect`: which adjacent pair of an ordered list of environments changes a cell's metric, measuring as
few environments as possible (docs/decisions.md, "Bisect").

`envlist` makes the ordered environments (matrix-file names or image patterns) and the one cell in each;
`search` is the procedure, over any way of measuring; `store_measure` measures through `execute.run_matrix` and reads
the store; `present` prints the answer with what differs between the pair's environments.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runner.base import console as consoles
from runner.base.errors import ConfigError
from runner.commands import load, sigterm
from runner.commands.base import Command, register
from runner.record.metrics import STATUS_METRIC as STATUS
from runner.record.metrics import get_metric

if TYPE_CHECKING:
    from runner.analysis import bisect_search as search

FORMATS = ("md", "json")
DEFAULT_THRESHOLD = "5%"
DEFAULT_MOST = 10


def parse_threshold(text: str) -> float:
    """--threshold: '10%' or 0.1; more than 0 and below 100%."""
    from runner.domain.cells import percentage
    try:
        value = float(percentage(text.strip()) if text.strip().endswith("%") else float(text))
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 < value < 1):
        raise ConfigError(f"--threshold {text}: a percentage above 0 and below 100% (10%) or a fraction (0.1)")
    return value


def settings_for(first: int, most: int | None, threshold: str, metric: str) -> search.Settings:
    from runner.analysis import bisect_pair
    from runner.analysis import bisect_search as search
    from runner.domain.cells import MOST_REPEATS
    if most is not None and not 2 <= most <= MOST_REPEATS:
        raise ConfigError(f"--max-repeats {most}: from 2 to {MOST_REPEATS}")
    top = most if most is not None else max(DEFAULT_MOST, first)
    return search.Settings(threshold=parse_threshold(threshold), metric=metric,
                           levels=bisect_pair.levels(min(first, top), top))


@register
class BisectCommand(Command):
    name = "bisect"
    help = ("Find the adjacent pair of environments where the cell's metric changes beyond the threshold, measuring as\n"
            "few environments as possible (binary search, repeats added where the answer is not clear yet; every repeat\n"
            "is stored, so a second bisect on the same store measures nothing new). A change of status counts too\n"
            "(unsupported -> ok). Prints the pair, the change with its interval and p-value, what it measured against a\n"
            "full sweep, and what differs between the two environments; a change spread over several steps is said so.")

    def run(self, environments: Sequence[str] | None, matrix: Path | None, db: Path, only: Sequence[str] | None,
            images: Sequence[str] | None, template: str | None, gpus: str | None, metric: str, threshold: str,
            max_repeats: int | None, fmt: str | None, workdir: Path, max_cells: int, verbose: bool) -> int:
        """Exit 0 when one pair makes the change, 1 when the two ends do not differ, 5 when undecided, 8 when the
        change is spread over several steps. Every repeat is stored as measured; so is the answer."""
        from runner.analysis import bisect_search as search
        from runner.analysis import envdiff
        from runner.bisect import envs as envlist
        from runner.bisect.store_measure import StoreMeasure
        from runner.report import bisect_answer as present
        from runner.report.diff import side_of
        from runner.store import Store
        m = load(matrix, max_cells)
        signal.signal(signal.SIGTERM, sigterm)
        if fmt is not None and fmt not in FORMATS:
            raise ConfigError(f"unknown bisect format {fmt!r}; allowed: {', '.join(FORMATS)} (default: tables)")
        metric_ = None if metric == STATUS else get_metric(metric)
        plan = envlist.plan(m, environments or (), images or (), template, gpus, only or ())
        run = plan.cells[0].run
        first = run.adaptive.min if run.adaptive else run.repeats
        settings = settings_for(first, max_repeats, threshold, metric_.name if metric_ else STATUS)
        err = consoles.stderr()
        argv, started = sys.argv[1:], time.time()
        with Store(db) as store:
            measure = StoreMeasure(plan.matrix, plan.cells, store, metric_, workdir=workdir, argv=argv,
                                   verbose=verbose, say=lambda text: err.print(text, markup=False, highlight=False))
            answer = search.bisect(len(plan.cells), measure, settings)

            def sides(c: search.PairComparison) -> tuple[envdiff.EnvSide, envdiff.EnvSide]:
                return (side_of(store, plan.names[c.a], [plan.cells[c.a].key]),
                        side_of(store, plan.names[c.b], [plan.cells[c.b].key]))

            diff = envdiff.diff(*sides(answer.culprit)) if answer.culprit is not None else None
            steps = tuple(sides(c) for c in answer.steps) if answer.outcome == search.SPREAD else ()
        cost = present.Cost(len(plan.names), len(answer.repeats), sum(measure.tally.looked.values()),
                            measure.tally.measured, settings.levels[0], settings.levels[-1])
        report = present.BisectReport(plan.names, plan.cell_text(), metric_, settings, answer, cost, diff, steps)
        with Store(db) as store:  # the answer is kept for the published site (runner/store/bisects.py)
            store.add_bisect(present.to_json(report), [c.key for c in plan.cells], argv, started, time.time())
        self.say(present.render(report, fmt))
        return int(answer.exit_code)
