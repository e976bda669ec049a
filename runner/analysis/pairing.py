"""Two sides' cells paired and judged: each pair's ratio B/A with its interval, Welch's p-value adjusted over the
pairs tested, and the decision in words (runner/analysis/compare.py builds a comparison on these)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from runner.analysis import change, resolution, significance
from runner.analysis.comparable import (
    Outcomes,
    for_the_metric,
    no_ratio,
    other_definition,
    outcome_change,
    throttling_note,
    why_not,
    with_outcomes,
)
from runner.analysis.frame import PARAM_KEYS, precision_index
from runner.analysis.sidefacts import _sorted
from runner.analysis.stats import THROTTLED
from runner.analysis.verdict import Verdict
from runner.record.metrics import Metric

MIN_EFFECT = 0.02  # a change below 2% is called noise, however small its p-value


def change_words(ratio: float, metric: Metric) -> str:
    """'1.23x faster' for a B/A ratio, in the metric's own words; '' without a ratio."""
    if not ratio or math.isnan(ratio) or ratio <= 0:
        return ""
    gain = ratio if metric.higher_is_better else 1 / ratio
    if f"{gain:.2f}" == "1.00" and f"{1 / gain:.2f}" == "1.00":
        return "1.00x"  # a ratio that rounds to 1 is not shown the same: only its interval can say that
    return f"{gain:.2f}x {metric.better}" if gain >= 1 else f"{1 / gain:.2f}x {metric.worse}"


def judge_pair(ratio: float, p: float, n_a: int, n_b: int, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT, coarse: float = 0.0, delta: change.Change | None = None,
               p_raw: float | None = None, family: int = 1) -> tuple[bool, str, Verdict]:
    """(significant, words, decision) for a pair measured on both sides. The decision answers "is B the same as A?"
    (runner/analysis/change.py `judge`, both ways): fail when the change is at least `min_effect` and significant
    (either way), pass only when the interval of B/A (`delta`) lies inside ±`min_effect`, undecided otherwise (with
    the repeats a side that would decide it), and when there are too few repeats to test. `p` is the p-value the
    decision uses (compare passes it adjusted for the pairs' false discovery rate). `coarse`: how far the figures'
    printed resolution alone may move the change (a share of A's mean; runner/analysis/resolution.py). Without
    `delta` (no interval), nothing can be shown the same: a pair that is not a change is undecided."""
    if n_a == 0 or n_b == 0 or math.isnan(ratio):
        return False, "no result", Verdict.UNDECIDED
    if not 0 < ratio < math.inf:
        return False, f"undecided: the ratio B/A is {ratio:g} (a change needs positive means)", Verdict.UNDECIDED
    if n_a < 2 or n_b < 2:
        return False, f"undecided: {significance.too_few(n_a, n_b)}", Verdict.UNDECIDED
    if math.isnan(p):
        return False, "undecided: no p-value", Verdict.UNDECIDED
    d = change.judge(delta or change.Change(ratio, math.nan, math.nan, n_a, n_b), min_effect, None, p, alpha,
                     metric, coarse, p_raw, family)
    if d.verdict is Verdict.FAIL:
        gain = ratio if metric.higher_is_better else 1 / ratio
        return True, metric.better if gain > 1 else metric.worse, Verdict.FAIL
    if d.verdict is Verdict.PASS:
        return False, f"same (within ±{change.threshold_text(min_effect)})", Verdict.PASS
    if coarse and coarse >= min_effect:
        return False, (f"undecided: the figures are printed too coarsely to tell (rounding alone may move the change "
                       f"by {coarse:.1%}; {change.threshold_text(min_effect)} is looked for)"), Verdict.UNDECIDED
    said = d.reason.split("; ")[1:]  # the interval itself is the table's (and the JSON's) own column
    if abs(math.log(ratio)) <= math.log1p(min_effect):
        said.insert(0, f"the interval reaches beyond ±{change.threshold_text(min_effect)}" if delta is not None and delta.has_interval
                    else f"no interval of the change to show it within ±{change.threshold_text(min_effect)}")
    return False, "undecided: " + "; ".join(said), Verdict.UNDECIDED


_STAT_COLS = ["n", "mean", "std", "ci_low", "ci_high", "statuses", "environments", "settings", "cell_keys", "steps_ok",
              "definition", THROTTLED]
_PAIR_WORDS = ["ratio", "ratio_low", "ratio_high", "needed", "change", "p_value", "p_adjusted", "significant",
               "verdict", "decision", "decided_by", "throttling", "_se", "_dof"]
OUTCOMES, METRIC = "outcomes", "metric"  # what decided a pair (`decided_by`): its outcomes' rates, or the metric
OK_ONLY = ", of the ok repeats"  # said after the change of a pair its outcomes decided: not what decided it


def pair_stats(sa: pd.DataFrame, sb: pd.DataFrame, metric: Metric, alpha: float = significance.ALPHA,
               min_effect: float = MIN_EFFECT, keys: Sequence[str] = PARAM_KEYS, unpaired: bool = True,
               same_definition: bool | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair two sides' cell statistics (from side_stats) on `keys`: ratio B/A, Welch p (and adjusted for the false
    discovery rate over the pairs tested), verdict and decision; and the unpaired cells (with `unpaired=False`, an
    empty frame of their columns: a caller that shows only the pairs). With `same_definition` (two whole machines;
    by default wherever the keys hold the environment), a pair is compared only where both measured the same
    definition of the cell: runner/analysis/compare.py `same_definition` says which.

    Where every key is a plain text or integer, held once a side (side_stats' cells always are), the cells are paired
    by their keys' values and the pairs' frame is made once; anything else goes through pandas' merge. Both ways give
    the same frames (tests/analysis/test_pair_rows.py holds them equal)."""
    keys = list(keys)
    same = "environment" in keys if same_definition is None else same_definition
    rows = _paired_rows(sa, sb, keys)
    if rows is None:
        return _merged_pair_stats(sa, sb, metric, alpha, min_effect, keys, unpaired, same)
    ia, ib, only_a, only_b = rows
    if not ia:
        pairs = pd.DataFrame(columns=_pair_columns(keys))
    else:
        a, b = sa.take(ia).reset_index(drop=True), sb.take(ib).reset_index(drop=True)
        words = _judge_columns(lambda c: (a if c[0] == "a" else b)[c[2:]], metric, alpha, min_effect, same)
        # The frame in its columns' order, side by side: one concat of whole frames, not sixty columns one by one.
        pairs = pd.concat([a[keys], *(part[_STAT_COLS].set_axis([f"{side}_{x}" for x in _STAT_COLS], axis=1)
                                      for side, part in (("a", a), ("b", b))),
                           pd.DataFrame({c: words[c] for c in _PAIR_WORDS})], axis=1)
    alone = _alone([("A", sa.take(only_a), ""), ("B", sb.take(only_b), "")] if unpaired else [], keys)
    return _typed(pairs, alone, keys)


def _alone(parts: Sequence[tuple[str, pd.DataFrame, str]], keys: Sequence[str]) -> pd.DataFrame | None:
    """The unpaired cells in report order, from each side's (label, rows, prefix of their columns); None where none."""
    rows = [pd.DataFrame({"side": side, **{k: part[k] for k in keys}, "environments": part[f"{pre}environments"],
                          "statuses": part[f"{pre}statuses"], "_first": part[f"{pre}_first"]})
            for side, part, pre in parts]
    alone = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    return None if alone.empty else _sorted(alone, ["side"])[["side", *keys, "environments", "statuses"]]


def _pair_columns(keys: Sequence[str]) -> list[str]:
    return [*keys, *(f"{s}_{x}" for s in "ab" for x in _STAT_COLS), *_PAIR_WORDS]


def _typed(pairs: pd.DataFrame, alone: pd.DataFrame | None, keys: Sequence[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The pairs' and the unpaired cells' frames with their columns' types (an empty frame of each where none)."""
    ints = dict.fromkeys(("batch_size", "gpus", "nodes"), np.dtype(int))
    if alone is None:  # the columns' types given, not cast: three casts cost more than the pairs' own frame
        alone = pd.DataFrame({c: np.empty(0, dtype=ints.get(c, object)) for c in ["side", *keys, "environments",
                                                                                     "statuses"]})
    throttled = [f"{side}_{THROTTLED}" for side in "ab"]
    for c in throttled:
        if pairs[c].isna().any():
            pairs[c] = pairs[c].fillna(0)
    # Each column cast where its type differs (a frame's astype copies every column, 60 of them, each time).
    return _cast(pairs, {"significant": np.dtype(bool), "a_n": np.dtype(int), "b_n": np.dtype(int),
                         **dict.fromkeys(throttled, np.dtype(int)), **ints}), _cast(alone, ints)


def _cast(df: pd.DataFrame, types: Mapping[str, np.dtype]) -> pd.DataFrame:
    """`df.astype(types).reset_index(drop=True)`, casting only the columns not already of their type."""
    df = df.reset_index(drop=True)
    for c, t in types.items():
        if c in df and df[c].dtype != t:
            df[c] = df[c].astype(t)
    return df


_REPORT_ORDER = ("model", "dataset", "options", "gpus", "nodes", "precision", "batch_size")  # _sorted's, then _first


def _paired_rows(sa: pd.DataFrame, sb: pd.DataFrame, keys: Sequence[str]
                 ) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """(A's rows, B's rows) of each pair in report order (`_sorted`: model, dataset, options, layout, precision, batch
    size, then A's first repeat), and the rows of each side that have no partner; None where the keys are not all
    plain (each key a column of texts or of integers on both sides, no key held twice on a side), which pandas'
    merge is left to pair as it does."""
    values = []
    for st in (sa, sb):
        if st.empty or not all(k in st for k in keys) or "_first" not in st or st["_first"].dtype.kind not in "iu":
            return None  # an empty side's columns take their types from the other side's in the merge
        cols = [_plain(st[k]) for k in keys]
        if any(c is None for c in cols):
            return None
        values.append((cols, list(zip(*cols, strict=True)) if keys else [() for _ in range(len(st))]))
    (ca, ka), (cb, kb) = values
    if any(x and y and type(x[0]) is not type(y[0]) for x, y in zip(ca, cb, strict=True)):
        return None
    at_b = {k: i for i, k in enumerate(kb)}
    if len(at_b) != len(kb) or len(set(ka)) != len(ka):
        return None
    ia = [i for i, k in enumerate(ka) if k in at_b]
    firsts = sa["_first"].tolist()
    order = [keys.index(k) for k in _REPORT_ORDER if k in keys]
    prec = keys.index("precision") if "precision" in keys else None

    def rank(i: int) -> tuple[object, ...]:
        k = ka[i]
        return (*(precision_index(k[j]) if j == prec else k[j] for j in order), firsts[i], k)  # then merge's order

    ia.sort(key=rank)
    held_a = set(ka)
    # The unpaired cells in the merge's order (their keys'), which `_sorted` keeps where its columns tie.
    only_a = sorted((i for i, k in enumerate(ka) if k not in at_b), key=ka.__getitem__)
    only_b = sorted((i for i, k in enumerate(kb) if k not in held_a), key=kb.__getitem__)
    return ia, [at_b[ka[i]] for i in ia], only_a, only_b


def _plain(col: pd.Series) -> list[object] | None:
    """A key column's values where it holds integers (not bools) or texts alone (object or string typed, not
    categorical: a category sorts in its own order); else None."""
    if col.dtype.kind in "iu" and isinstance(col.dtype, np.dtype):
        return col.tolist()
    if not (col.dtype == object or isinstance(col.dtype, pd.StringDtype)):
        return None
    vals = col.tolist()
    return vals if all(type(v) is str for v in vals) else None


def _merged_pair_stats(sa: pd.DataFrame, sb: pd.DataFrame, metric: Metric, alpha: float, min_effect: float,
                       keys: list[str], unpaired: bool, same_definition: bool | None = None
                       ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`pair_stats` through pandas' outer merge: any keys (missing values, floats, a key held twice on a side)."""
    same = "environment" in keys if same_definition is None else same_definition
    pair_cols = _pair_columns(keys)
    merged = sa.add_prefix("a_").rename(columns={f"a_{k}": k for k in keys}).merge(
        sb.add_prefix("b_").rename(columns={f"b_{k}": k for k in keys}),
        on=keys, how="outer", indicator=True, sort=False)
    both = merged[merged["_merge"] == "both"].copy()
    pairs = pd.DataFrame(columns=pair_cols) if both.empty else \
        _sorted(_judged(both, metric, alpha, min_effect, same))[pair_cols]
    alone = _alone([(side, merged[merged["_merge"] == tag], f"{side.lower()}_")
                    for side, tag in (("A", "left_only"), ("B", "right_only"))] if unpaired else [], keys)
    return _typed(pairs, alone, keys)


def _judged(both: pd.DataFrame, metric: Metric, alpha: float, min_effect: float, same_definition: bool
            ) -> pd.DataFrame:
    """The paired cells with their ratio, p-values (adjusted over the pairs tested), verdict and decision."""
    both["a_n"], both["b_n"] = both["a_n"].astype(int), both["b_n"].astype(int)
    for c, v in _judge_columns(both.__getitem__, metric, alpha, min_effect, same_definition).items():
        both[c] = v
    both["_first"] = both["a__first"]
    return both


def _judge_columns(col: Callable[[str], pd.Series], metric: Metric, alpha: float, min_effect: float,
                   same_definition: bool) -> dict[str, object]:
    """Each pair's ratio, p-values (adjusted over the pairs tested), interval, verdict and decision, as columns, from
    the paired cells' columns (`col("a_mean")`: A's means, one per pair)."""
    an_, bn_ = col("a_n").astype(int), col("b_n").astype(int)
    am, bm = col("a_mean").to_numpy(dtype=float), col("b_mean").to_numpy(dtype=float)
    ratio = np.array([change.ratio_of(x, y) if n and m else math.nan for x, y, n, m in zip(am, bm, an_, bn_, strict=True)],
                     dtype=float)  # the pair's one ratio B/A (NaN where it cannot be sized both ways)
    # Every repeat equal (min == max): no spread at all, whatever rounding left in the std.
    sda, sdb = (np.where(col(f"{s}_min") == col(f"{s}_max"), 0.0, col(f"{s}_std").to_numpy(dtype=float))
                for s in "ab")
    apart = [why_not(metric, (sx, sy), (dx, dy), (tx, ty)) or (other_definition(ka, kb) if same_definition else "")
             for ka, kb, sx, sy, dx, dy, tx, ty in zip(
                 col("a_cell_keys"), col("b_cell_keys"), col("a_settings"), col("b_settings"),
                 col("a_definition"), col("b_definition"), col("a_steps_ok"), col("b_steps_ok"), strict=True)]
    q = np.array([resolution.pair(resolution.Quanta(ia, ra), resolution.Quanta(ib, rb)) for ia, ra, ib, rb in zip(
        *(col(c).fillna(0.0).to_numpy(dtype=float) for c in ("a_resi", "a_resr", "b_resi", "b_resr")), strict=True)])
    p = significance.welch_from_stats(am, sda, an_, bm, sdb, bn_, q, q)
    p = np.where([bool(w) for w in apart], math.nan, p)
    p_adj = significance.adjust(p)
    coarse = [resolution.half_width(x, x, m) / abs(m) if m and math.isfinite(m) else 0.0 for x, m in zip(q, am, strict=True)]
    deltas = [change.of_stats(ma, sx, x, mb, sy, y, (qq, qq)) if not why else change.Change(math.nan, math.nan, math.nan)
              for ma, sx, x, mb, sy, y, qq, why in zip(am, sda, an_, bm, sdb, bn_, q, apart, strict=True)]
    family = int(np.isfinite(p).sum())
    judged = [_verdict(d, (padj, praw, family), x, y, sa_, sb_, why, ma, mb, c, metric, alpha, min_effect)
              for d, padj, praw, x, y, sa_, sb_, why, ma, mb, c in zip(
                  deltas, p_adj, p, an_, bn_, col("a_statuses"), col("b_statuses"), apart, am, bm, coarse,
                  strict=True)]
    ratio = np.where([bool(w) for w in apart], math.nan, ratio)
    significant = [j[0] for j in judged]
    return {
        "ratio": ratio,
        "_se": [d.se for d in deltas], "_dof": [d.dof for d in deltas],
        "ratio_low": [d.low for d in deltas], "ratio_high": [d.high for d in deltas],
        # Repeats that would decide: only where the metric's interval is what is open (more repeats of a pair held
        # undecided by its outcomes, or by failure modes on both sides, need not decide it).
        "needed": [change.needed(d, min_effect, None, c, alpha / max(family, 1))
                   if j[2] is Verdict.UNDECIDED and j[3] == METRIC and d.has_interval else None
                   for d, j, c in zip(deltas, judged, coarse, strict=True)],
        "p_value": p, "p_adjusted": p_adj,
        # A pair its failures decided: the change is of the ok repeats only, and says so in every output.
        "change": [f"{w}{OK_ONLY}" if w and j[3] == OUTCOMES else w
                   for w, j in zip((change_words(r, metric) for r in ratio.tolist()), judged, strict=True)],
        "significant": significant,
        "verdict": [j[1] for j in judged],
        "decision": [j[2].value for j in judged],
        "decided_by": [j[3] for j in judged],
        "throttling": [throttling_note(sig, ta, tb, x, y) for sig, ta, tb, x, y in zip(
            significant, col(f"a_{THROTTLED}"), col(f"b_{THROTTLED}"), an_, bn_, strict=True)],
    }


def _verdict(d: change.Change, ps: tuple[float, float, int], x: int, y: int, sa_: str, sb_: str, why: str, ma: float,
             mb: float, coarse: float, metric: Metric, alpha: float, min_effect: float
             ) -> tuple[bool, str, Verdict, str]:
    """(significant, words, decision, what decided) of one pair: not comparable (''), a change of outcome
    ('outcomes': its direction is the outcomes', not the ratio of the ok repeats), or the metric's test ('metric')."""
    if why:
        return False, why, Verdict.UNDECIDED, ""
    outcomes = outcome_change(Outcomes.parse(sa_), Outcomes.parse(sb_), alpha)
    if outcomes is not None and (outcomes.verdict is not Verdict.UNDECIDED or not (x and y)):
        said = for_the_metric(outcomes)  # oom on both: nothing measured, undecided as the gate says
        return said.verdict is Verdict.FAIL, said.why, said.verdict, OUTCOMES
    unsized = no_ratio(metric, ma, mb) if x and y else ""
    p, p_raw, family = ps
    significant, words, decision = (False, unsized, Verdict.UNDECIDED) if unsized else judge_pair(
        d.ratio, p, x, y, metric, alpha, min_effect, coarse, d, p_raw, family)
    held = outcomes is not None and decision is not Verdict.FAIL  # the outcomes, not told apart, hold it undecided
    decision, words = with_outcomes(decision, words, outcomes)
    return significant, words, decision, OUTCOMES if held else METRIC
