"""What the top of a report and of a site says, counted the same way everywhere: the totals (runs, repeats stored,
the repeats the tables show), each run's status as its repeats hold it, and the warnings as short lines, each
linking to its detail."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.domain.outcomes import Status

# A repeat that never ran: a run that left one is not complete, whatever it wrote when it ended.
NOT_ENDED = (Status.NOT_STARTED.value,)


def plural(n: int, word: str, words: str = "") -> str:
    return f"{n} {word if n == 1 else words or word + 's'}"


def run_status(stored: str, counts: Mapping[str, int]) -> str:
    """A run's status as its repeats hold it: the store's word, except that a run is complete only when every repeat
    it stored ended ('incomplete: 30 not_started' otherwise)."""
    left = {s: int(n) for s, n in counts.items() if s in NOT_ENDED and n}
    if stored == "complete" and left:
        return "incomplete: " + ", ".join(f"{n} {s}" for s, n in left.items())
    return stored or "—"


def totals(runs: list[dict[str, Any]], stored: int, shown: pd.DataFrame, n_cells: int, n_envs: int,
           hidden_names: int = 0) -> str:
    """'4 runs stored 12 repeats; the tables show each repeat's newest: 3 repeats in 1 cell, 1 environment: 3 ok'.
    Every run that stored a repeat is counted (and listed in the runs table), not only those whose rows the tables
    show."""
    counts = shown["status"].value_counts().to_dict() if len(shown) else {}
    text = f"{plural(len(runs), 'run')} stored {plural(stored, 'repeat')}"
    shows = (f"{plural(len(shown), 'repeat')} in {plural(n_cells, 'cell')}, {plural(n_envs, 'environment')}: "
             f"{an.status_summary(counts)}")
    if stored == len(shown):
        return f"{plural(len(runs), 'run')}, {shows}"
    text += f"; the tables show {len(shown)} of them (each repeat's newest row, each cell's newest definition): {shows}"
    if hidden_names:
        text += f" (older definitions of {plural(hidden_names, 'cell')} are listed, not averaged in)"
    return text


@dataclass(frozen=True)
class Caution:
    """A warning as the top of a report shows it: one short line, and the section that says it in full."""

    text: str
    anchor: str
    detail: str = ""


# Where a warning's detail is, as GitHub names a Markdown heading's anchor (the HTML page's ids are the keys).
MD_ANCHORS = {"flags": "numbers-to-read-with-care", "definitions": "cells-measured-under-more-than-one-definition"}
FLAG_WORDS = {"noisy": "vary by more than {cv} between repeats", "throttled": "ran on a throttled GPU",
              "data-bound": "waited on the data loader for more than {wait} of the window",
              "unsteady": "had a warm-up that reached its ceiling before it was steady"}


def cautions(flags: pd.DataFrame, details: list[str], definitions: str = "", n_names: int = 0) -> list[Caution]:
    """One short line per kind of suspicious cell (the full sentences, naming the cells, are `details`: the section
    'flags'), and one for names measured under more than one definition (section 'definitions')."""
    out = []
    if definitions:
        out.append(Caution(f"{plural(n_names, 'cell')} measured under more than one definition: the tables show the "
                           "newest", "definitions", definitions))
    kinds = [k for k in FLAG_WORDS if (flags["flag"] == k).any()] if len(flags) else []
    for k, detail in zip(kinds, details, strict=False):
        n = int((flags["flag"] == k).sum())
        what = FLAG_WORDS[k].format(cv=f"{an.NOISY_CV:.0%}", wait=f"{an.DATA_BOUND:.0%}")
        out.append(Caution(f"{plural(n, 'cell')} {what}", "flags", detail))
    return out
