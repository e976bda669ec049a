"""The evidence page's "Where the time went": wall time of the stored repeats, their measured windows and warm-ups, and
the repeats that measured but were not admitted (counted, never silently dropped)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from runner.kit.cell_results import CellResult


def section(cells: Sequence[CellResult], asked: float, doc: dict[str, Any]) -> str:
    walls, windows, warm, shortest = 0.0, 0.0, 0.0, math.inf
    left_out: dict[str, int] = {}  # stored ok, not admitted: diverged or refused
    for res in cells:
        for r in res.rows:
            walls += r.wall_s or 0.0
            warm += float((r.metrics.get("warmup") or {}).get("seconds") or 0)  # spent, admitted or not
            w = r.metrics.get("window_s")
            if r.ok and isinstance(w, int | float):
                windows += w
                shortest = min(shortest, w)
            elif r.stored_status == "ok" and not r.ok:
                left_out[r.status] = left_out.get(r.status, 0) + 1
    if walls <= 0:
        return ""
    share = windows / walls
    doc["time"] = {"repeat_wall_s": walls, "window_s": windows, "window_share": share,
                   "shortest_window_s": shortest if shortest < math.inf else None, "warmup_s": warm,
                   "not_admitted": left_out}
    return "\n".join([
        "## Where the time went", "",
        f"The stored repeats took {walls:.0f} s of wall time; {windows:.0f} s of it ({share:.0%}) were measured "
        f"windows. {warm:.0f} s ({warm / walls:.0%}) were warm-up iterations (until the iteration times were "
        "steady; a cell's first repeat sizes its window from them); the rest is each repeat's fresh process: "
        "Python and PyTorch imports, CUDA start-up, building the model and data, cuDNN's autotuning in the first "
        "iterations, evaluation and exit. " + window_words(shortest, asked, left_out)])


def window_words(shortest: float, asked: float, left_out: Mapping[str, int]) -> str:
    """The windows the figures stand on, and the repeats that measured but were not admitted (their time is in the
    wall time above, their windows are not counted as measured)."""
    words = (f"The shortest admitted window was {shortest:.2f} s ({asked:g} s asked)." if shortest < math.inf
             else "No repeat was admitted yet.")
    if left_out:
        n = sum(left_out.values())
        words += (f" {n} measured repeat{'' if n == 1 else 's'} {'was' if n == 1 else 'were'} not admitted ("
                  + ", ".join(f"{k} {v}" for k, v in sorted(left_out.items()))
                  + "; the headline says why): their windows are not counted as measured.")
    return words
