"""Adaptive repeats in the run loop: after the minimum is stored, which repeats each cell still needs.

Reads only the store, so it works the same on a fresh run, a resumed one and a store filled by an
earlier fixed `repeats:` (those repeats count).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from runner.analysis.adaptive import CellState, assess
from runner.domain.cells import Cell, Task
from runner.domain.outcomes import Status
from runner.record.metrics import HEADLINE
from runner.record.repeat import admitted
from runner.store import Store


def states(cells: Sequence[Cell], store: Store, run_id: str | None = None) -> list[CellState]:
    """The rule's view of every adaptive cell (cells with a fixed `repeats:` are left out). With `run_id`
    (`matrix run --force`), only that run's repeats count: older ones are being measured again."""
    adaptive = [c for c in cells if c.run.adaptive is not None and c.run.adaptive.until == "ci"]
    if not adaptive:
        return []
    keys = {c.key for c in adaptive}
    statuses: dict[tuple[str, int], Status] = {}
    values: dict[str, list[float]] = defaultdict(list)
    for rep in admitted(r for r in store.rows([run_id] if run_id else None) if r.cell_key in keys):
        statuses[(rep.cell_key, rep.number)] = Status(rep.status)
        if rep.ok:
            tput = rep.metrics.get(HEADLINE)
            if isinstance(tput, int | float):
                values[rep.cell_key].append(float(tput))
    busy = store.claims(keys, run_id)  # what other live runs are measuring: not free, and counted as coming
    out = []
    for cell in adaptive:
        rule = cell.run.adaptive
        assert rule is not None
        final = {r: st for (k, r), st in statuses.items() if k == cell.key and st.final}
        # An interrupted repeat is simply run again; any other status ends the cell's extra repeats.
        all_ok = all(st in (Status.OK, Status.CANCELLED) for (k, _), st in statuses.items() if k == cell.key)
        a = assess(values[cell.key], rule, stored=len(final), all_ok=all_ok)
        coming = {r for (k, r) in busy if k == cell.key and r not in final}
        free = tuple(r for r in range(rule.max) if r not in final and r not in coming)
        out.append(CellState(cell, a, free, len(coming)))
    return out


def more_tasks(cells: Sequence[Cell], store: Store, run_id: str | None = None) -> list[Task]:
    """The repeats to run now for cells whose interval is still wider than their target."""
    tasks = []
    for st in states(cells, store, run_id):
        tasks += [Task(st.cell, r) for r in st.free[:max(0, st.assessment.more - st.in_flight)]]
    return tasks
