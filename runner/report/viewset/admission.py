"""Admission: the repeats set aside before anything ranked them (a diverged training, a window shorter than promised,
a figure no machine reaches, a loss scaler that skipped most steps), each with why; and the admitted ones that carry
a note (a few skipped steps, a window capped by its ceiling, a figure left out). runner/record/admission.py decides;
docs/admission.md says what each check means."""

from __future__ import annotations

from typing import Any

import pandas as pd

from runner.domain.outcomes import Status
from runner.report import fmt
from runner.report.fmt import Section, Table, TableCell
from runner.report.labels import KEY_LABELS, key_text, varying
from runner.report.viewkit import Built, Context, View

COLUMNS = ["environment", "model", "precision", "batch_size", "dataset", "options", "cell_key", "run_id", "repeat",
           "stored_status", "status", "admission"]


def not_admitted(df: pd.DataFrame) -> pd.DataFrame:
    """The repeats of `df` that admission set aside: stored ok (or diverged by the benchmark) and not ok now."""
    if df.empty or "stored_status" not in df:
        return pd.DataFrame(columns=COLUMNS)
    bad = df[df["stored_status"].isin([Status.OK.value, Status.DIVERGED.value]) & (df["status"] != Status.OK.value)]
    return bad.sort_values("id", kind="stable")[COLUMNS].reset_index(drop=True)


def noted(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell, the notes admission left on admitted repeats, with how many repeats carry each."""
    cols = ["environment", "model", "precision", "batch_size", "dataset", "options", "cell_key", "note", "repeats"]
    if df.empty or "admission" not in df:
        return pd.DataFrame(columns=cols)
    ok = df[(df["status"] == Status.OK.value) & (df["admission"] != "")]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    out = ok.groupby(["environment", "model", "precision", "batch_size", "dataset", "options", "cell_key",
                      "admission"], sort=False).size().reset_index(name="repeats")
    return out.rename(columns={"admission": "note"})[cols]


class AdmissionView(View):
    name = "admission"
    order = 5
    heading = "Repeats not admitted"
    nav = "Not admitted"
    intro = ("A repeat counts only when its training stayed finite, its window was as long as promised, its loss "
             "scaler did not skip most steps and its figures are ones a machine can reach. These were set aside "
             "before any table, comparison or verdict: a diverged training is an outcome (as an out-of-memory is); "
             "a refused repeat is neither a figure nor a failure. matrix run --rerun-failed measures them again.")
    intro_md = intro.replace("matrix run --rerun-failed", "`matrix run --rerun-failed`")

    def build(self, ctx: Context) -> Built:
        bad, notes = not_admitted(ctx.shown), noted(ctx.shown)
        return Built(self, sections(bad, notes), bad, notes)

    def json(self, built: Built) -> dict[str, Any]:
        return {"not_admitted": fmt.records(built.frame), "admission_notes": fmt.records(built.extra)}


def sections(bad: pd.DataFrame, notes: pd.DataFrame) -> list[Section]:
    out = []
    if not bad.empty:
        keys = varying(bad, ["environment", "model", "precision", "batch_size", "dataset", "options"],
                       always=("environment", "model", "precision"))
        table = Table([*(KEY_LABELS[k] for k in keys), "run", "repeat", "status", "why"],
                      align=["l"] * len(keys) + ["l", "r", "l", "l"])
        for r in bad.to_dict("records"):
            table.add(*(key_text(k, r[k]) for k in keys), str(r["run_id"]), TableCell(str(int(r["repeat"]) + 1), "num"),
                      TableCell(str(r["status"]), str(r["status"])), str(r["admission"]))
        n = len(bad)
        diverged = int((bad["status"] == Status.DIVERGED.value).sum())
        out.append(Section("Set aside", table, f"{n} repeat{'s' if n != 1 else ''} set aside: {diverged} diverged, "
                           f"{n - diverged} refused."))
    if not notes.empty:
        keys = varying(notes, ["environment", "model", "precision", "batch_size", "dataset", "options"],
                       always=("environment", "model", "precision"))
        table = Table([*(KEY_LABELS[k] for k in keys), "admitted repeats", "note"],
                      align=["l"] * len(keys) + ["r", "l"])
        for r in notes.to_dict("records"):
            table.add(*(key_text(k, r[k]) for k in keys), TableCell(str(r["repeats"]), "num"), str(r["note"]))
        out.append(Section("Admitted with a note", table, ""))
    return out

