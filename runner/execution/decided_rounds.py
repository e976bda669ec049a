"""Repeats until decided: after every cell has its minimum, which repeats the cells of undecided checks still need.

With `repeats: {min, max, until: decided}` (or `matrix run --until-decided`), the checks of the matrix file (its
`gate:` entries and its `references:`) are judged on what the store holds; a check that more repeats could decide
(its spread gives an estimate, runner/analysis/change.py `needed`, or a side has one ok repeat) gets more on the cells
it reads, one look at a time: a few fixed levels from `min` to `max` (3, 5, 8, 13, 20 for 3-20: each about 1.6 times
the one before), so a check the next look decides stops there, whatever an estimate from a few repeats said. Each level is a look at the data, and looking until something
passes would pass more than it should, so the checks of such a run decide at alpha split over its looks (Bonferroni:
0.05 / 5 = 0.01 for 3-20, intervals at 99%), as bisect does; benchmarks/stats_check.py measures what that keeps.
The rule reads only the store, so an interrupted run resumes with the same command, repeats stored earlier count,
and the repeats run interleaved as the matrix says, like any others.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from runner import analysis as an
from runner.analysis import gate_entries, references, significance
from runner.analysis.bisect_pair import levels
from runner.analysis.verdict import Verdict
from runner.domain.cells import Cell, Task
from runner.matrix import Matrix
from runner.record.repeat import admitted
from runner.store import Store


def aiming(cells: Sequence[Cell]) -> list[Cell]:
    """The cells whose run aims at decisions (`until: decided`)."""
    return [c for c in cells if c.run.adaptive is not None and c.run.adaptive.until == "decided"]


def looks(cells: Sequence[Cell]) -> tuple[int, ...]:
    """The repeat levels at which a run that aims at decisions looks: from the fewest `min` to the most `max`."""
    rules = [c.run.adaptive for c in aiming(cells) if c.run.adaptive]
    if not rules:
        return ()
    return levels(min(r.min for r in rules), max(r.max for r in rules))


def alpha_for(cells: Sequence[Cell]) -> float:
    """The level a run's checks decide at: alpha, split over its looks when it aims at decisions."""
    n = len(looks(cells))
    return significance.ALPHA / n if n else significance.ALPHA


def next_level(cells: Sequence[Cell], at_least: int, most: int) -> int:
    """The first look at or above `at_least` repeats (never past `most`)."""
    return min([lv for lv in looks(cells) if lv >= at_least] or [most], default=most)


@dataclass(frozen=True)
class Pending:
    """One undecided check: what it is, the cells it reads, and the repeats a side its spread says would decide it
    (None: not known yet, e.g. one ok repeat on a side)."""

    what: str
    keys: tuple[str, ...]
    needed: int | None
    why: str


def _keys(joined: str) -> tuple[str, ...]:
    return tuple(k.strip().partition("@")[0] for k in joined.split(",") if k.strip())


def pending(m: Matrix, cells: Sequence[Cell], frame: pd.DataFrame) -> tuple[list[Pending], int, int]:
    """The undecided checks more repeats could decide, and how many checks there are and how many are decided (at
    the run's level: `alpha_for`)."""
    out: list[Pending] = []
    total = decided = 0
    alpha = alpha_for(cells)
    if m.references:
        for j in references.judge(m.references, cells, frame, alpha):
            total += 1
            decided += j.verdict is not Verdict.UNDECIDED
            if j.verdict is Verdict.UNDECIDED and not j.final and (j.needed is not None or j.n == 1):
                out.append(Pending(f"reference {j.cell} {j.metric} {j.expected}", (j.cell_key,), j.needed, j.reason))
    mine = frame[frame["cell_key"].isin({c.key for c in cells})] if len(frame) else frame
    for entry in m.gates:
        for c in gate_entries.evaluate(entry, mine, alpha):
            total += 1
            decided += c.verdict is not Verdict.UNDECIDED
            if c.more_would_help:
                cell = " ".join(str(c.params[k]) for k in ("environment", "model", "precision", "batch_size") if k in c.params)
                out.append(Pending(f"gate {entry.title}: {cell}", (*_keys(c.a_keys), *_keys(c.b_keys)), c.needed,
                                   c.reason))
    return out, total, decided


def _stored(store: Store, keys: Iterable[str], run_id: str | None) -> dict[str, set[int]]:
    """Per cell key, the repeat numbers stored with a final status (admission's view)."""
    keys = set(keys)
    out: dict[str, set[int]] = {k: set() for k in keys}
    for rep in admitted(r for r in store.rows([run_id] if run_id else None) if r.cell_key in keys):
        if rep.final:
            out[rep.cell_key].add(rep.number)
    return out


def more_tasks(m: Matrix, cells: Sequence[Cell], store: Store, run_id: str | None = None) -> list[Task]:
    """The repeats to run now for the cells of undecided checks (none when every check is decided or at `max`)."""
    chosen = aiming(cells)
    if not chosen or not (m.references or m.gates):
        return []
    frame = an.frame(store.rows([run_id] if run_id else None))
    checks, _, _ = pending(m, chosen, frame)
    by_key = {c.key: c for c in chosen}
    target: dict[str, int] = {}
    stored = _stored(store, by_key, run_id)
    for p in checks:
        keys = [k for k in p.keys if k in by_key]
        if not keys:
            continue
        # One look at a time (each may decide, and the looks are fixed whatever an estimate says), both sides of the
        # check to the same count, so that their repeats interleave and neither is measured alone.
        n = max(len(stored[k]) for k in keys)
        for k in keys:
            target[k] = max(target.get(k, 0), next_level(chosen, n + 1, _most(by_key[k])))
    busy = store.claims(set(target), run_id)
    tasks = []
    for k, n in target.items():
        have = stored[k]
        coming = {r for (key, r) in busy if key == k and r not in have}
        free = [r for r in range(_most(by_key[k])) if r not in have and r not in coming]
        tasks += [Task(by_key[k], r) for r in free[:max(0, n - len(have) - len(coming))]]
    return tasks


def _most(cell: Cell) -> int:
    return cell.run.adaptive.max if cell.run.adaptive else cell.run.repeats
