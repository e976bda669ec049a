"""The report's views (docs/architecture.md, "Report views") as formatted tables, built from the analysis frames.

The head of every report (runs, environments, definitions, recipes, windows, the precision grid, failures) is
built here; the views after the grid are registered in runner/report/viewset/ (docs/internals.md, "How to add
a report view"). Each view appears only when the data has its axes: the environment comparison needs two
environments, the precision summary fp32 and another precision, scaling more than one GPU or node count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from runner import analysis as an
from runner.analysis.identity import origins
from runner.domain.outcomes import Status
from runner.report import answer, fmt, head, viewset
from runner.report import pairs as pair_views
from runner.report.fmt import DASH, Section, Table, TableCell
from runner.report.grid import grid_sections
from runner.report.labels import (
    KEY_LABELS,
    cell_label,
    definitions_sentence,
    iso,
    key_text,
    machines,
    varying,
)
from runner.report.viewkit import Built, Context

ENV_LABELS = (("machine", "machine"), ("machine_from", "from"), ("hardware", "device"), ("env_cpu", "CPU"), ("env_driver", "driver"),
              ("env_torch", "torch"), ("env_cuda", "CUDA"), ("env_cudnn", "cuDNN"), ("env_python", "Python"),
              ("env_image", "image"), ("env_repo_digest", "image digest"), ("env_image_id", "image id"),
              ("env_container_runtime", "container runtime"), ("env_container_runtime_version", "runtime version"),
              ("env_hostname", "host"),
              ("backend", "backend"), ("tags", "tags"), ("run_ids", "runs"))


@dataclass
class Failure:
    """A cell with repeats that did not end ok, with what its log said last."""

    label: str
    status: str
    statuses: str
    reason: str
    log_tail: str


@dataclass
class ReportModel:
    """Everything a report shows, formatted; the frames stay alongside for CSV and JSON."""

    name: str
    totals: str
    hardware: list[str]
    warnings: list[head.Caution]
    runs: Table
    environments: Table
    recipes: Section | None
    grid: list[Section]
    failures: list[Failure]
    frame: pd.DataFrame
    summary: pd.DataFrame
    views: list[Built] = field(default_factory=list)  # runner/report/viewset: every registered view, in order
    recipes_df: pd.DataFrame = field(default_factory=pd.DataFrame)
    run_records: list[dict[str, Any]] = field(default_factory=list)
    measurement: Section | None = None          # warm-up and measured windows per cell
    measurement_df: pd.DataFrame = field(default_factory=pd.DataFrame)
    definitions: Section | None = None          # names measured under more than one definition
    definitions_df: pd.DataFrame = field(default_factory=pd.DataFrame)
    shown: pd.DataFrame = field(default_factory=pd.DataFrame)  # the rows the tables show (`frame`: every row)
    answer: answer.Answer | None = None         # the first section: what differs, by how much, how sure
    flags: list[str] = field(default_factory=list)  # each warning in full, naming its cells
    flags_df: pd.DataFrame = field(default_factory=pd.DataFrame)         # quality_flags of the summary
    environments_df: pd.DataFrame = field(default_factory=pd.DataFrame)  # environment_info of `shown`

    def built(self, name: str) -> Built | None:
        return next((b for b in self.views if b.view.name == name), None)

    @property
    def shown_views(self) -> list[Built]:
        """The views with something to show, for the pages (report.json carries every view)."""
        return [b for b in self.views if b.shown]

    def sections(self, name: str) -> list[Section]:
        b = self.built(name)
        return b.sections if b is not None else []

    def view_frame(self, name: str) -> pd.DataFrame:
        b = self.built(name)
        return b.frame if b is not None else pd.DataFrame()

    @property
    def history(self) -> list[Section]:
        return self.sections("history")

    @property
    def scaling_df(self) -> pd.DataFrame:
        return self.view_frame("scaling")

    @property
    def history_df(self) -> pd.DataFrame:
        return self.view_frame("history")


# --- views ------------------------------------------------------------------------------------

def environments_table(info: pd.DataFrame) -> Table:
    """Fields as rows, environments as columns: which hardware and versions produced the numbers."""
    envs = list(info["environment"])
    table = Table(["", *envs])
    for col, label in ENV_LABELS:
        if col not in info:
            continue  # the machine: only where the results come from more than one
        values = [str(v) for v in info[col]]
        if not any(values):
            continue
        if col in ("env_repo_digest", "env_image_id"):
            values = [fmt.short_digest(v) for v in values]
        table.add(TableCell(label, "key"), *(TableCell(v or DASH) for v in values))
    return table


RECIPE_LABELS = {"recipe_math": "math", "recipe_units": "ran on", "recipe_loss_scale": "loss scale",
                 "recipe_tf32": "TF32", "recipe_flags": "flags", "recipe_optimizer": "optimizer", "cpu_math": "CPU math"}


def emulated_sentences(recipes: pd.DataFrame, envs: bool = True) -> list[str]:
    """'bf16 emulated on this CPU (no AVX512-BF16 ...): expect it slower than fp32.', once per environment and
    precision whose math was not native on its CPU."""
    out: list[str] = []
    if recipes.empty or "cpu_math" not in recipes:
        return out
    for r in recipes.drop_duplicates(["environment", "precision", "cpu_math"]).to_dict("records"):
        if "emulated" not in str(r["cpu_math"]):
            continue
        where = f" in {r['environment']}" if envs else ""
        why = f" ({r['cpu_why']})" if r["cpu_why"] else ""
        out.append(f"{r['precision']} emulated on this CPU{where}{why}: expect it slower than fp32.")
    return out


def recipes_section(recipes: pd.DataFrame) -> Section | None:
    """How each precision ran in each environment: the mechanism and switches the bench recorded, and on a CPU
    whether the precision's math was native there."""
    if recipes.empty:
        return None
    show_env = recipes["environment"].nunique() > 1
    cols = [c for c in RECIPE_LABELS if c.startswith("recipe_") and (c == "recipe_math" or
                                                                      (recipes[c] != an.DASH_WORD).any())]
    if "cpu_math" in recipes and (recipes["cpu_math"] != "").any():
        cols.append("cpu_math")
    table = Table([*(["environment"] if show_env else []), "precision", *(RECIPE_LABELS[c] for c in cols), "cells"],
                  align=["l"] * (len(cols) + 1 + show_env) + ["r"])
    previous = None
    for r in recipes.to_dict("records"):
        first = show_env and r["environment"] != previous
        table.add(*([TableCell(r["environment"] if first else "", "key")] if show_env else []),
                  TableCell(r["precision"], "key"),
                  *(TableCell(r[c] or DASH, "status" if c == "cpu_math" and "emulated" in str(r[c]) else "") for c in cols),
                  TableCell(str(r["cells"]), "num"),
                  row_class="group" if first and previous is not None else "")
        previous = r["environment"]
    note = ("What each precision meant where it ran, as the benchmark recorded it: autocast is PyTorch's "
            "native mixed precision, apex amp NVIDIA's, and 'fp32 master weights' the hand-made FP16 "
            "recipe with a static loss scale; compare like with like.")
    if "recipe_units" in cols:
        note += (" 'Ran on' is what the precision's matrix math used on that device: tensor cores where the GPU "
                 "has them for the format, else 'no ... tensor cores' (the precision ran, without them).")
    if "cpu_math" in cols:
        note += (" CPU math: the vector instructions PyTorch dispatched to, and whether the precision's arithmetic "
                 "is native on that CPU or emulated (converted to fp32 and back).")
    emulated = emulated_sentences(recipes, show_env)
    if emulated:
        note += " " + " ".join(emulated)
    return Section("How each precision ran", table, note)


def measurement_section(meas: pd.DataFrame) -> Section | None:
    """Warm-up and measured windows per cell: how many warm-up iterations its repeats ran and whether they were
    steady, the window's iterations (calibrated by the first repeat, or fixed) and seconds, the machine's load."""
    known = meas[meas["warmup_min"].notna() | (meas["window_iters"] != "")] if not meas.empty else meas
    if known.empty:
        return None  # results from before warm-ups and windows were recorded: nothing to say
    meas = known
    keys = varying(meas, ["environment", *an.PARAM_KEYS], always=("model", "precision", "batch_size"))
    table = Table([*(KEY_LABELS[k] for k in keys), "warm-up", "steady", "window", "window (s)", "load (1 min)"],
                  align=["l"] * len(keys) + ["r", "l", "r", "r", "r"])
    for r in meas.to_dict("records"):
        lo, hi = r["warmup_min"], r["warmup_max"]
        warm = DASH if lo != lo else f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"
        if not r["n_judged"]:
            steady = TableCell("fixed count", "muted")
        elif r["n_unsteady"]:
            steady = TableCell(f"{r['n_steady']} of {r['n_judged']} (ceiling)", "status")
        else:
            steady = TableCell(f"{r['n_steady']} of {r['n_judged']}", "good")
        window = (r["window_iters"] or DASH) + (" (calibrated)" if r["calibrated"] else "")
        load = DASH if r["load_min"] != r["load_min"] else (
            f"{r['load_min']:.1f}" if f"{r['load_min']:.1f}" == f"{r['load_max']:.1f}"
            else f"{r['load_min']:.1f}–{r['load_max']:.1f}")
        table.add(*(key_text(k, r[k]) for k in keys), TableCell(warm, "num"), steady, TableCell(window, "num"),
                  TableCell(fmt.number(r["window_s_mean"], 3), "num"), TableCell(load, "num"))
    note = ("Warm-up: the discarded iterations each repeat ran (until steady: the medians of the last two windows of "
            "iteration times agreed, or a ceiling came first; docs/statistics.md). Window: the measured iterations; "
            "with iterations: auto the cell's first repeat chose them from its warm-up and every later repeat ran "
            "the same. Load: the machine's 1-minute load average at the end of each window (this benchmark "
            "included).")
    return Section("Warm-up and measured windows", table, note)


def by_machine(df: pd.DataFrame, provenance: Mapping[str, an.Provenance] | None = None) -> pd.DataFrame:
    """The rows with their machine, and an environment measured on more than one machine named once per machine
    ('local-cpu · Intel Xeon'): the same name measured on two machines is two cells, never an older and a newer
    definition of one. `environment_name` keeps the name as the matrix spelled it; `machine_from` where the machine's
    repeats came from (this store, or the file it imported them from: `provenance`, by store id)."""
    machine = machines(df)
    spans = machine.groupby(df["environment"], sort=False).transform("nunique") > 1
    named = df["environment"].where(~spans, df["environment"].astype(str) + " · " + machine)
    came = {o: _came(o, provenance or {}) for o in set(origins(df))}
    return df.assign(machine=machine, environment_name=df["environment"], environment=named,
                     machine_from=origins(df).map(came))


def _came(origin: str, provenance: Mapping[str, an.Provenance]) -> str:
    """Where a machine's repeats came from, in words: this store, or the files it imported them from."""
    if not origin:
        return "this store"
    return provenance[origin].words() if origin in provenance else f"imported from store {origin}"


def with_machines(info: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    """The environments with the machines each one's results came from (`shown`'s machine column), and where."""
    per_env = shown.groupby("environment", sort=False)["machine"].agg(lambda s: ", ".join(dict.fromkeys(s)))
    came = shown.groupby("environment", sort=False)["machine_from"].agg(lambda s: ", ".join(dict.fromkeys(s))) \
        if "machine_from" in shown else per_env.map(lambda _: "")
    return info.assign(machine=info["environment"].map(per_env).fillna(""),
                       machine_from=info["environment"].map(came).fillna(""))


def hardware_lines(info: pd.DataFrame) -> list[str]:
    """One line per environment naming the device and the versions: for the top of every report."""
    lines = []
    for row in info.itertuples(index=False):
        r = row._asdict()
        bits = [r["hardware"] or "device unknown"]
        if r["env_cpu"] and not str(r["hardware"]).startswith(str(r["env_cpu"])):
            bits.append(f"CPU {r['env_cpu']}")
        for col, label in (("env_driver", "driver"), ("env_torch", "torch"), ("env_cuda", "CUDA")):
            if r[col]:
                bits.append(f"{label} {r[col]}")
        if r["env_image"]:
            bits.append(f"image {r['env_image']}")
        lines.append(f"{r['environment']} ({r['backend']}): " + ", ".join(bits))
    return lines


def admitted_counts(records: list[dict[str, Any]], df: pd.DataFrame) -> list[dict[str, Any]]:
    """Each run's repeats counted as admission sees them (runner/record/admission.py): the store counts a stored
    ok, the report the admitted ones (a diverged or refused repeat by its word). A record that already carries its
    counts of every row it stored (runner/report/__init__.py reads them) keeps them."""
    if df.empty or "run_id" not in df:
        return records
    by_run = {r: dict(sorted(g.value_counts().items())) for r, g in df.groupby("run_id", sort=False)["status"]}
    return [r if r.get("counts") and r.get("admitted") else dict(r, counts=by_run[r["run_id"]])
            if r.get("run_id") in by_run else r for r in records]


def runs_table(records: list[dict[str, Any]]) -> Table:
    table = Table(["run", "matrix", "started", "host", "status", "results"], align=["l"] * 5 + ["l"])
    for r in records:
        counts = r.get("counts") or {}
        status = head.run_status(str(r.get("status") or ""), counts)
        table.add(r["run_id"], r.get("matrix_name") or DASH, iso(r.get("started_at")), r.get("host") or DASH,
                  TableCell(status, "" if status in ("complete", "done") else "status"),
                  an.status_summary(counts) or DASH)
    return table


def definitions_table(several: pd.DataFrame, keys: Sequence[str], pooled: bool = False,
                      sides: dict[str, str] | None = None) -> Table:
    """Names measured under more than one definition: one row per definition, with what tells them apart,
    their repeats and runs, and whether the tables show it."""
    cols = [c for c in keys if c != "options" or several[c].astype(bool).any()]
    label_keys = [k for k in cols if k != "side"]
    table = Table([*(["side"] if sides else []), "cell", "definition (key)", "shown", "run settings", "repeats",
                   "runs", "measured (UTC)", "differs in"])
    previous = None
    for r in several.to_dict("records"):
        name = tuple(r[k] for k in label_keys)
        first = name != previous
        previous = name
        start, end = iso(r["first_at"]), iso(r["last_at"])
        when = start if start == end else f"{start} – {end}"
        shown = "pooled" if pooled else "shown" if r["shown"] else "not shown"
        table.add(*([sides.get(str(r["side"]), str(r["side"]))] if sides else []),
                  TableCell(cell_label(r, label_keys) if first else "", "key"), TableCell(r["cell_key"], "num"),
                  TableCell(shown, "good" if r["shown"] else "muted"), r["settings"] or DASH, TableCell(r["statuses"], "num"),
                  r["runs"], when, TableCell(r["differs"] if first else "", "muted"),
                  row_class="group" if first else "")
    return table


def definitions_section(defs: an.Definitions) -> Section | None:
    if defs.several.empty:
        return None
    return Section("Cells measured under more than one definition",
                   definitions_table(defs.several, defs.keys, defs.pooled),
                   definitions_sentence(defs.n_names, defs.pooled))


def failures(summary: pd.DataFrame) -> list[Failure]:
    bad = summary[summary["status"] != Status.OK.value]
    return [Failure(cell_label(r), str(r["status"]), str(r["statuses"]), str(r["reason"]), str(r["log_tail"]))
            for r in bad.to_dict("records")]


def warnings(flags: pd.DataFrame, shown: int = 5) -> list[str]:
    """One sentence per kind of suspicious cell, naming the worst few: numbers not to trust blindly."""
    out = []
    words = {"noisy": (f"throughput varies by more than {an.NOISY_CV:.0%} (CV) between repeats",
                       "more repeats, a longer window or a quieter machine"),
             "throttled": ("the GPU throttled in some ok repeats (its SM clock fell, or a power, thermal or "
                           "hardware slowdown was seen; the share of repeats in brackets)",
                           "reading the clocks and reasons stored with each repeat, and a GPU with headroom"),
             "data-bound": (f"the data loader kept the device waiting for more than {an.DATA_BOUND:.0%} "
                            "of the timed window", "more loader workers, or synthetic data to measure compute"),
             "unsteady": ("a repeat's warm-up reached its ceiling before the iteration times were steady (share of "
                          "repeats)", "a higher warm-up max or max_time, or a quieter machine")}
    for flag, (what, fix) in words.items():
        cells = flags[flags["flag"] == flag].sort_values("value", ascending=False, kind="stable")
        if cells.empty:
            continue
        named = ", ".join(f"{cell_label(r)} ({fmt.percent(r['value'])})" for r in cells.head(shown).to_dict("records"))
        more = f" and {len(cells) - shown} more" if len(cells) > shown else ""
        n = len(cells)
        out.append(f"In {n} cell{'s' if n != 1 else ''} {what}: {named}{more}. Try {fix}.")
    return out


def build(df: pd.DataFrame, run_records: list[dict[str, Any]], name: str,
          history: pd.DataFrame | None = None, provenance: Mapping[str, an.Provenance] | None = None,
          stored: int | None = None, on_summary: Callable[[pd.DataFrame], None] | None = None,
          on_answer: Callable[[answer.Answer | None], None] | None = None) -> ReportModel:
    """All views of one report from the long frame and the runs it came from; `history` is
    runner.analysis.history over every stored row (not only each repeat's newest); `stored`: how many rows the runs
    stored (default: the frame's); `on_summary` is called with the summary as soon as it is known (the report makes
    the charts that need only it then, and has them drawn while the comparisons are built), `on_answer` with the
    answer as soon as the comparisons are (its chart is drawn while the other views are built).

    A name (environment and params) measured under more than one definition shows its newest definition in
    every table; the others are listed in their own section and counted in the totals, never averaged in."""
    hist = history if history is not None else pd.DataFrame()
    run_records = admitted_counts(run_records, df)
    several_machines = machines(df).nunique() > 1
    defs = an.choose(by_machine(df, provenance) if several_machines else df, an.CELL_KEYS)
    shown = defs.frame
    summary = an.summarize(shown)
    if on_summary is not None:
        on_summary(summary)
    plain_info = an.environment_info(shown)
    info = with_machines(plain_info, shown) if several_machines else plain_info

    fam = pair_views.families(shown, summary, info=plain_info)
    metric = an.METRICS["throughput"]
    found = answer.build(answer.families(fam, several=len(info) > 1), hist, metric, nothing_sentence(summary, hist))
    if on_answer is not None:
        on_answer(found)
    ctx = Context(shown, summary, info, run_records, hist, fam)
    built = [v.build(ctx) for v in viewset.VIEWS]
    recipes = an.precision_recipes(shown)
    meas = an.measurement(shown)
    totals = head.totals(run_records, len(df) if stored is None else stored, shown, len(summary), len(info),
                         defs.n_names if len(shown) != len(df) else 0)
    flags = an.quality_flags(summary)
    details = warnings(flags)
    definitions = definitions_section(defs)
    cautions = head.cautions(flags, details, definitions.note if definitions else "",
                             defs.n_names)
    return ReportModel(
        name=name, totals=totals, hardware=hardware_lines(info), warnings=cautions,
        runs=runs_table(run_records),
        environments=environments_table(info), recipes=recipes_section(recipes),
        grid=grid_sections(summary, shown), failures=failures(summary), frame=df, summary=summary, views=built,
        recipes_df=recipes, run_records=run_records,
        definitions=definitions, definitions_df=defs.several, shown=shown,
        measurement=measurement_section(meas), measurement_df=meas, answer=found, flags=details, flags_df=flags,
        environments_df=plain_info,
    )


def nothing_sentence(summary: pd.DataFrame, hist: pd.DataFrame) -> str:
    """Why a report has no comparison, in one sentence, with what would give it one."""
    envs = summary["environment"].nunique() if len(summary) else 0
    precisions = set(summary["precision"]) if len(summary) else set()
    lacks = ["one environment" if envs < 2 else "",
             "no fp32 to compare the other precisions with" if precisions and an.BASELINE_PRECISION not in precisions
             else "one precision" if len(precisions) < 2 else "",
             "every cell measured by one run" if hist.empty else ""]
    said = ", ".join(w for w in lacks if w) or "no two cells that pair"
    return (f"Nothing here is compared: {said}. Add an environment or a precision (with fp32) to the matrix, or run "
            "it again to see each cell's history.")
