"""Two sides of a comparison: pair their cells, test each pair, and say what changed."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from runner.analysis import resolution, significance
from runner.analysis.comparable import (
    Outcomes,
    align_steps,
    definition_text,
    for_the_metric,
    measure_notes,
    no_ratio,
    outcome_change,
    throttling_note,
    why_not,
    with_outcomes,
)
from runner.analysis.frame import (
    BASELINE_PRECISION,
    ENV_FIELDS,
    PARAM_KEYS,
    RECIPE_COLUMNS,
    Metric,
    environment_rank,
    get_metric,
    latest,
    precision_rank,
)
from runner.analysis.identity import Definitions, choose
from runner.analysis.stats import THROTTLED, _join_unique, cell_attributes, metric_stats, throttled_counts
from runner.analysis.verdict import Verdict
from runner.errors import ConfigError
from runner.results import Status

MIN_EFFECT = 0.02  # a change below 2% is called noise, however small its p-value

SIDE_KINDS = ("env", "tag", "backend", "run")
# Sides named only with their prefix: the machine a repeat ran on. `host:NAME` its host name; `machine:X` its
# hardware in words (as the environments table shows it) or the id of the store it was imported from
# (runner/store/exchange.py stores an imported repeat's run as `<run id>@<store id>`).
MACHINE_KINDS = ("host", "machine")


@dataclass(frozen=True)
class Side:
    """The rows one side of a comparison selects, and how the reference was understood.

    `frame` holds every definition the side selected; what is compared (`chosen`) is, per pair of params,
    the newest definition, or with `pool` all of them (runner/analysis/identity.py)."""

    ref: str
    kind: str       # env | tag | backend | run | host | machine
    value: str
    frame: pd.DataFrame
    pool: bool = False
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, compare=False, repr=False)
    _defs: list[Definitions] = field(default_factory=list, compare=False, repr=False)

    @property
    def label(self) -> str:
        return self.ref

    @property
    def definitions(self) -> Definitions:
        """Per pair key (the params), the definition compared and the ones left out (or pooled)."""
        if not self._defs:
            self._defs.append(choose(self.frame, PARAM_KEYS, self.pool))
        return self._defs[0]

    @property
    def chosen(self) -> pd.DataFrame:
        return self.definitions.frame

    def stats(self, metric: str) -> pd.DataFrame:
        """This side's cells keyed on params (computed once: a report compares the baseline many times)."""
        if metric not in self._cache:
            self._cache[metric] = side_stats(self.chosen, metric)
        return self._cache[metric]

    def precision_ratios(self, label: str) -> pd.DataFrame:
        key = "ratios"
        if key not in self._cache:
            self._cache[key] = precision_ratios(self.chosen)
        return self._cache[key].assign(side=label)

    def info(self, label: str) -> pd.DataFrame:
        key = "info"
        if key not in self._cache:
            self._cache[key] = environment_info(self.chosen)
        return self._cache[key].assign(side=label)

    @property
    def environments(self) -> list[str]:
        return list(dict.fromkeys(self.chosen["environment"]))


def available_sides(df: pd.DataFrame) -> dict[str, list[str]]:
    """What a compare side may name, from the rows in the store."""
    return {
        "env": sorted(set(df["environment"])),
        "tag": sorted({t for tags in df["tags"] for t in tags}),
        "backend": sorted(set(df["backend"])),
        "run": sorted(set(df["run_id"])),
    }


def select_side(df: pd.DataFrame, ref: str, pool: bool = False) -> Side:
    """Rows matching `ref`: an environment name, else a tag, else a backend kind, else a run id prefix.

    `env:`, `tag:`, `backend:` or `run:` in front of the name chooses the kind when names clash. `pool`:
    pool every definition the side holds for a pair of params, instead of comparing the newest.
    """
    kind, sep, value = ref.partition(":")
    kinds: Sequence[str] = SIDE_KINDS
    if sep and kind in MACHINE_KINDS:
        return _machine_side(df, ref, kind, value, pool)
    if sep and kind in SIDE_KINDS:
        kinds = (kind,)
    else:
        value = ref
    for k in kinds:
        if k == "env":
            mask = df["environment"] == value
        elif k == "tag":
            mask = df["tags"].map(lambda tags: value in tags)
        elif k == "backend":
            mask = df["backend"] == value
        else:
            run_ids = sorted({r for r in df["run_id"] if r.startswith(value)}) if value else []
            if len(run_ids) > 1:
                raise ConfigError(f"run id prefix {value!r} is ambiguous: {', '.join(run_ids)}")
            mask = df["run_id"].isin(run_ids)
        if bool(mask.any()):
            return Side(ref, k, value, latest(df[mask]), pool)
    sides = available_sides(df)
    listed = "; ".join(f"{k}: {', '.join(v) if v else '(none)'}" for k, v in sides.items())
    raise ConfigError(f"{ref!r} matches no result in the store. Sides that exist: {listed}")


def _machine_side(df: pd.DataFrame, ref: str, kind: str, value: str, pool: bool) -> Side:
    if kind == "host":
        mask = df["env_hostname"] == value
        known = sorted({h for h in df["env_hostname"] if h})
    else:
        stores = df["run_id"].map(lambda r: r.rpartition("@")[2] if "@" in r else "")
        mask = (df["hardware"] == value) | ((stores != "") & stores.str.startswith(value) & (len(value) >= 4))
        known = sorted({h for h in df["hardware"] if h} | {s for s in stores if s})
    if value and bool(mask.any()):
        return Side(ref, kind, value, latest(df[mask]), pool)
    raise ConfigError(f"{ref!r} matches no result in the store; {kind}: {', '.join(known) or '(none)'}")


def change_words(ratio: float, metric: Metric) -> str:
    """'1.23x faster' for a B/A ratio, in the metric's own words; '' without a ratio."""
    if not ratio or math.isnan(ratio) or ratio <= 0:
        return ""
    gain = ratio if metric.higher_is_better else 1 / ratio
    if f"{gain:.2f}" == "1.00" and f"{1 / gain:.2f}" == "1.00":
        return "1.00x (same)"
    return f"{gain:.2f}x {metric.better}" if gain >= 1 else f"{1 / gain:.2f}x {metric.worse}"


def judge_pair(ratio: float, p: float, n_a: int, n_b: int, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT, coarse: float = 0.0) -> tuple[bool, str, Verdict]:
    """(significant, words, decision) for a pair measured on both sides. The decision answers "is B the
    same as A?": pass (no significant change of at least `min_effect`), fail (a significant change, either
    way) or undecided (too few repeats to test: never called "not significant"). `p` is the p-value the
    decision uses (compare passes it adjusted for the pairs' false discovery rate). `coarse`: how far the figures'
    printed resolution alone may move the change (a share of A's mean; runner/analysis/resolution.py): a change
    is called only when it holds at either end of that, and "the same" only when rounding could not hide one."""
    if n_a == 0 or n_b == 0 or math.isnan(ratio):
        return False, "no result", Verdict.UNDECIDED
    if not 0 < ratio < math.inf:
        return False, f"undecided: the ratio B/A is {ratio:g} (a change needs positive means)", Verdict.UNDECIDED
    if n_a < 2 or n_b < 2:
        return False, f"undecided: {significance.too_few(n_a, n_b)}", Verdict.UNDECIDED
    if math.isnan(p):
        return False, "undecided: no p-value", Verdict.UNDECIDED
    gain = ratio if metric.higher_is_better else 1 / ratio
    size = max(gain, 1 / gain) - 1
    too_coarse = (f"undecided: the figures are printed too coarsely to tell (rounding alone may move the change by "
                  f"{coarse:.1%}; {min_effect:.0%} is looked for)")
    if p >= alpha:
        if coarse and coarse >= min_effect:
            return False, too_coarse, Verdict.UNDECIDED
        return False, "not significant", Verdict.PASS
    if size + coarse < min_effect:
        return False, f"not significant (change < {min_effect:.0%})", Verdict.PASS
    if size - coarse < min_effect:
        return False, too_coarse, Verdict.UNDECIDED
    return True, metric.better if gain > 1 else metric.worse, Verdict.FAIL


def geometric_mean(ratios: Iterable[float]) -> float:
    """exp(mean(log r)) over the positive, finite ratios; NaN when there are none."""
    vals = np.asarray([r for r in ratios if r is not None and np.isfinite(r) and r > 0], dtype=float)
    return float(np.exp(np.log(vals).mean())) if vals.size else math.nan


@dataclass(frozen=True)
class Comparison:
    """Everything `matrix compare` shows; templates and writers only format these frames."""

    a: Side
    b: Side
    metric: Metric
    alpha: float
    min_effect: float
    pairs: pd.DataFrame             # PARAM_KEYS + a_*/b_* stats, ratio, change, p_value, p_adjusted,
                                    # significant, verdict (words), decision (pass/fail/undecided)
    unpaired: pd.DataFrame          # side, PARAM_KEYS, environment(s), statuses
    precision_ratios: pd.DataFrame  # side, PARAM_KEYS - precision, precision, fp32_mean, mean, ratio
    environments: pd.DataFrame      # side, environment, backend, hardware and versions
    geomean: float
    recipes: pd.DataFrame = field(default_factory=pd.DataFrame)  # precision, a, b: ran differently
    correction: str = significance.CORRECTION
    notes: list[str] = field(default_factory=list)  # how the sides were measured (emulated math, unsteady warm-ups)

    @property
    def geomean_words(self) -> str:
        return change_words(self.geomean, self.metric)

    @property
    def n_ratios(self) -> int:
        """Pairs with a ratio (both sides measured): what the geometric mean is over."""
        if self.pairs.empty:
            return 0
        r = self.pairs["ratio"].to_numpy(dtype=float)
        return int((np.isfinite(r) & (r > 0)).sum())

    @property
    def n_significant(self) -> int:
        return int(self.pairs["significant"].sum()) if not self.pairs.empty else 0

    def n_decision(self, decision: Verdict) -> int:
        return int((self.pairs["decision"] == decision.value).sum()) if not self.pairs.empty else 0

    @property
    def n_tested(self) -> int:
        """Pairs with a p-value: the family the false discovery rate is controlled over."""
        return int(self.pairs["p_value"].notna().sum()) if not self.pairs.empty else 0


def side_stats(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One side's cells keyed on their params: statuses, environments, run settings and cell keys (more than
    one only when the side was pooled on purpose), and the metric's statistics."""
    work = df.rename(columns={"environment": "environments", "cell_key": "cell_keys"})
    ok = work["status"] == Status.OK.value
    steps = work["steps"] if "steps" in work else pd.Series("", index=work.index)
    hows = work[f"how_{metric}"] if f"how_{metric}" in work else pd.Series("", index=work.index)
    units = work[f"unit_{metric}"] if f"unit_{metric}" in work else pd.Series("", index=work.index)
    work = work.assign(steps_ok=[str(int(s)) if k and isinstance(s, int | float) and s == s else ""
                                 for s, k in zip(steps, ok, strict=True)],
                       definition=[definition_text(h, u) if k and h else "" for h, u, k in
                                   zip(hows, units, ok, strict=True)])
    attrs, gid = cell_attributes(work, PARAM_KEYS, ["environments", "settings", "cell_keys", "steps_ok", "definition"])
    st = metric_stats(df, gid, len(attrs), [metric])
    st.columns = [c[len(metric) + 1:] for c in st.columns]
    st[THROTTLED] = throttled_counts(df, gid, len(attrs))
    return pd.concat([attrs[[*PARAM_KEYS, "statuses", "environments", "settings", "cell_keys", "steps_ok", "definition",
                             "_first"]],
                      st], axis=1)


def pair_cells(a: pd.DataFrame, b: pd.DataFrame, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair A's and B's cells (long frames, one definition per params) on their params: (pairs, unpaired)."""
    return pair_stats(side_stats(a, metric.name), side_stats(b, metric.name), metric, alpha, min_effect)


def pair_stats(sa: pd.DataFrame, sb: pd.DataFrame, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair two sides' cell statistics (from side_stats): ratio B/A, Welch p (and adjusted for the false
    discovery rate over the pairs tested), verdict and decision; and the unpaired cells."""
    stat_cols = ["n", "mean", "std", "ci_low", "ci_high", "statuses", "environments", "settings", "cell_keys",
                 "steps_ok", "definition", THROTTLED]
    pair_cols = [*PARAM_KEYS, *(f"{s}_{x}" for s in "ab" for x in stat_cols),
                 "ratio", "change", "p_value", "p_adjusted", "significant", "verdict", "decision", "throttling"]
    unpaired_cols = ["side", *PARAM_KEYS, "environments", "statuses"]
    merged = sa.add_prefix("a_").rename(columns={f"a_{k}": k for k in PARAM_KEYS}).merge(
        sb.add_prefix("b_").rename(columns={f"b_{k}": k for k in PARAM_KEYS}),
        on=list(PARAM_KEYS), how="outer", indicator=True, sort=False)
    both = merged[merged["_merge"] == "both"].copy()
    if both.empty:
        pairs = pd.DataFrame(columns=pair_cols)
    else:
        an_, bn_ = both["a_n"].astype(int), both["b_n"].astype(int)
        am, bm = both["a_mean"].to_numpy(dtype=float), both["b_mean"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where((an_ > 0) & (bn_ > 0) & (am != 0), bm / am, math.nan)
        # Every repeat equal (min == max): no spread at all, whatever rounding left in the std.
        sda, sdb = (np.where(both[f"{s}_min"] == both[f"{s}_max"], 0.0, both[f"{s}_std"].to_numpy(dtype=float))
                    for s in "ab")
        apart = [why_not(metric, (sx, sy), (dx, dy), (tx, ty)) for sx, sy, dx, dy, tx, ty in zip(
            both["a_settings"], both["b_settings"], both["a_definition"], both["b_definition"], both["a_steps_ok"],
            both["b_steps_ok"], strict=True)]
        q = np.array([resolution.pair(resolution.Quanta(ia, ra), resolution.Quanta(ib, rb)) for ia, ra, ib, rb in zip(
            *(both[c].fillna(0.0).to_numpy(dtype=float) for c in ("a_resi", "a_resr", "b_resi", "b_resr")),
            strict=True)])
        qa = qb = q
        p = significance.welch_from_stats(am, sda, an_, bm, sdb, bn_, qa, qb)
        p = np.where([bool(w) for w in apart], math.nan, p)
        p_adj = significance.adjust(p)
        coarse = [resolution.half_width(x, y, m) / abs(m) if m and math.isfinite(m) else 0.0
                  for x, y, m in zip(qa, qb, am, strict=True)]
        judged = []
        for r, q, x, y, sa_, sb_, why, ma, mb, c in zip(ratio, p_adj, an_, bn_, both["a_statuses"],
                                                        both["b_statuses"], apart, am, bm, coarse, strict=True):
            if why:
                judged.append((False, why, Verdict.UNDECIDED))
                continue
            outcomes = outcome_change(Outcomes.parse(sa_), Outcomes.parse(sb_), alpha)
            if outcomes is not None and (outcomes.verdict is not Verdict.UNDECIDED or not (x and y)):
                said = for_the_metric(outcomes)  # oom on both: nothing measured, undecided as the gate says
                judged.append((said.verdict is Verdict.FAIL, said.why, said.verdict))
                continue
            unsized = no_ratio(metric, ma, mb) if x and y else ""
            significant, words, decision = (False, unsized, Verdict.UNDECIDED) if unsized else judge_pair(
                r, q, x, y, metric, alpha, min_effect, c)
            decision, words = with_outcomes(decision, words, outcomes)
            judged.append((significant, words, decision))
        both["a_n"], both["b_n"] = an_, bn_
        both["ratio"] = np.where([bool(w) for w in apart], math.nan, ratio)
        both["p_value"], both["p_adjusted"] = p, p_adj
        both["change"] = [change_words(r, metric) for r in both["ratio"]]
        both["significant"] = [j[0] for j in judged]
        both["verdict"] = [j[1] for j in judged]
        both["decision"] = [j[2].value for j in judged]
        both["throttling"] = [throttling_note(sig, ta, tb, x, y) for sig, ta, tb, x, y in zip(
            both["significant"], both[f"a_{THROTTLED}"], both[f"b_{THROTTLED}"], an_, bn_, strict=True)]
        both["_first"] = both["a__first"]
        pairs = _sorted(both)[pair_cols]
    rows = []
    for side, tag in (("A", "left_only"), ("B", "right_only")):
        part = merged[merged["_merge"] == tag]
        low = side.lower()
        rows.append(pd.DataFrame({"side": side, **{k: part[k] for k in PARAM_KEYS},
                                  "environments": part[f"{low}_environments"],
                                  "statuses": part[f"{low}_statuses"], "_first": part[f"{low}__first"]}))
    unpaired = pd.concat(rows, ignore_index=True)
    unpaired = _sorted(unpaired, ["side"])[unpaired_cols] if not unpaired.empty else pd.DataFrame(
        columns=unpaired_cols)
    pairs = pairs.astype({"significant": bool})
    for side in "ab":
        pairs[f"{side}_n"] = pairs[f"{side}_n"].astype(int)
        pairs[f"{side}_{THROTTLED}"] = pairs[f"{side}_{THROTTLED}"].fillna(0).astype(int)
    for k in ("batch_size", "gpus", "nodes"):
        pairs[k] = pairs[k].astype(int)
        unpaired[k] = unpaired[k].astype(int)
    return pairs.reset_index(drop=True), unpaired.reset_index(drop=True)


def _sorted(df: pd.DataFrame, first: Sequence[str] = ()) -> pd.DataFrame:
    """Rows in report order: model, dataset, options, layout, precision (fp32 first), batch size."""
    if df.empty:
        return df
    cols = [c for c in (*first, "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size")
            if c in df or c == "_prec"]
    tmp = df.assign(_prec=precision_rank(df["precision"]) if "precision" in df else 0)
    return tmp.sort_values([*cols, "_first"] if "_first" in tmp else cols, kind="stable").drop(columns="_prec")


def precision_ratios(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per configuration, each precision's mean throughput over fp32's (the FP16/FP32 speed ratio); NaN, and `why`
    says why, where the core would not pair the two cells (run settings or the throughput's definition differ)."""
    keys = [k for k in PARAM_KEYS if k != "precision"]
    cols = ["side", *keys, "precision", "fp32_mean", "mean", "ratio", "why"]
    ok = df[(df["status"] == Status.OK.value) & df["throughput"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    ok = ok.assign(_def=[definition_text(h, u) for h, u in zip(ok["how_throughput"], ok["unit_throughput"],
                                                                 strict=True)])
    means = ok.groupby([*keys, "precision"], sort=False, dropna=False).agg(
        mean=("throughput", "mean"), _first=("id", "min"), _def=("_def", _join_unique),
        _set=("settings", _join_unique)).reset_index()
    base = means[means["precision"] == BASELINE_PRECISION][[*keys, "mean", "_def", "_set"]]
    merged = means[means["precision"] != BASELINE_PRECISION].merge(base, on=keys, how="inner", suffixes=("", "32"))
    merged = merged.rename(columns={"mean32": "fp32_mean"})
    merged["why"] = [why_not(get_metric("throughput"), (s32, s), (d32, d)) for s32, s, d32, d in zip(
        merged["_set32"], merged["_set"], merged["_def32"], merged["_def"], strict=True)]
    merged["ratio"] = np.where(merged["why"] == "", merged["mean"] / merged["fp32_mean"], math.nan)
    merged["side"] = side
    return _sorted(merged)[cols].reset_index(drop=True)


def precision_recipes(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment and precision, each distinct way it ran (from repeats that got that far) and its cells;
    `cpu_math`/`cpu_why`: on a CPU, whether the precision's math was native there (frame.MEASURE_COLUMNS)."""
    cols = ["side", "environment", "precision", *RECIPE_COLUMNS, "recipe", "cpu_math", "cpu_why", "cells"]
    # What ran: a repeat that ended unsupported was planned but never trained, so it says nothing of how.
    known = df[(df["recipe"] != "") & (df["status"] != Status.UNSUPPORTED.value)] if "recipe" in df else df.iloc[0:0]
    if known.empty:
        return pd.DataFrame(columns=cols)
    if "cpu_math" not in known:
        known = known.assign(cpu_math="", cpu_why="")
    out = known.groupby(["environment", "precision", *RECIPE_COLUMNS, "recipe", "cpu_math", "cpu_why"],
                        sort=False).agg(cells=("cell_key", "nunique"), _first=("id", "min")).reset_index()
    out = out.assign(side=side, _env=out["environment"].map(environment_rank(df)),
                     _prec=precision_rank(out["precision"]))
    return out.sort_values(["_env", "_prec", "_first"], kind="stable")[cols].reset_index(drop=True)


def recipe_differences(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Precisions both sides ran, but differently: precision, A's recipes, B's recipes (joined with '; ')."""
    cols = ["precision", "a", "b"]
    ra, rb = precision_recipes(a), precision_recipes(b)
    rows = []
    for p in dict.fromkeys([*ra["precision"], *rb["precision"]]):
        sa = list(dict.fromkeys(ra.loc[ra["precision"] == p, "recipe"]))
        sb = list(dict.fromkeys(rb.loc[rb["precision"] == p, "recipe"]))
        if sa and sb and set(sa) != set(sb):
            rows.append({"precision": p, "a": "; ".join(sa), "b": "; ".join(sb)})
    return pd.DataFrame(rows, columns=cols)


def environment_info(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment: backend, hardware and the versions the environment turned out to have."""
    joined = ["backend", "tags", "hardware", *(f"env_{f}" for f in ENV_FIELDS), "run_ids"]
    cols = ["side", "environment", *joined]
    if df.empty:
        return pd.DataFrame(columns=cols)
    out, _ = cell_attributes(df.rename(columns={"run_id": "run_ids"}), ["environment"], joined)
    out["side"] = side
    return out.sort_values("_first", kind="stable")[cols].reset_index(drop=True)


def compare(a: Side, b: Side, metric: Metric | str = "throughput", alpha: float = significance.ALPHA,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Side A against side B: pairs with ratio B/A and a verdict, unpaired cells, FP16/FP32 per side."""
    m = get_metric(metric) if isinstance(metric, str) else metric
    shared = set(a.frame["id"]) & set(b.frame["id"])
    if shared:
        envs = _join_unique(a.frame[a.frame["id"].isin(shared)]["environment"])
        raise ConfigError(f"{a.ref!r} and {b.ref!r} select the same results (environment {envs}): "
                          "pick two disjoint sides, e.g. two environment names")
    sa, sb = a.stats(m.name), b.stats(m.name)
    notes = measure_notes([("A", a.ref, a.chosen), ("B", b.ref, b.chosen)])
    if m.name == "loss_end":
        fa, fb, at = align_steps(a.chosen, b.chosen)
        if at:
            sa, sb = side_stats(fa, m.name), side_stats(fb, m.name)
            steps = sorted(set(at.values()))
            notes.append(f"Where a pair's windows or warm-ups differ in length, its loss is compared at the last step "
                         f"every repeat of both sides recorded (step {', '.join(map(str, steps))}; {len(at)} "
                         f"pair{'s' if len(at) != 1 else ''}).")
    pairs, unpaired = pair_stats(sa, sb, m, alpha, min_effect)
    return Comparison(
        a=a, b=b, metric=m, alpha=alpha, min_effect=min_effect, pairs=pairs, unpaired=unpaired,
        precision_ratios=pd.concat([a.precision_ratios("A"), b.precision_ratios("B")], ignore_index=True),
        environments=pd.concat([a.info("A"), b.info("B")], ignore_index=True),
        geomean=geometric_mean(pairs["ratio"]) if not pairs.empty else math.nan,
        recipes=recipe_differences(a.chosen, b.chosen), notes=notes,
    )
