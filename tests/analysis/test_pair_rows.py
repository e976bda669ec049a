"""The pairs of two sides made by their keys' values (`pair_stats`' own pairing) are the pairs pandas' outer merge
makes (`_merged_pair_stats`, kept for keys that are not plain): the same frames, to the bit and the type, over
generated sides (cells on one side only, failed and out-of-memory repeats, printed resolutions, repeats that all
read the same, run settings that differ, repeat ids that collide), keyed on the params, on the params but the
precision (a report's precision pairs) and on the environment too (two machines). And each precision's speed-up
over fp32 (`precision_ratios`) equals the pandas aggregation it replaced."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runner.analysis as an
from runner.analysis import pairing as compare_mod
from runner.analysis.frame import BASELINE_PRECISION, PARAM_KEYS, frame_columns
from runner.analysis.sidefacts import precision_ratios
from runner.analysis.stats import _join_unique
from runner.record.metrics import HEADLINE, get_metric
from tests.analysis.helpers import long_frame, rows_for

THROUGHPUT = get_metric("throughput")
NO_PRECISION = tuple(k for k in PARAM_KEYS if k != "precision")

cell = st.fixed_dictionaries({
    "model": st.sampled_from(["resnet50", "mnist_cnn", "vgg"]),
    "precision": st.sampled_from(["fp32", "fp16", "bf16", "amp"]),
    "batch_size": st.sampled_from([32, 64]),
    "values": st.lists(st.sampled_from([100.0, 100.0, 101.5, 98.25, 250.0, 0.125, 1e6]), min_size=0, max_size=4),
    "status": st.sampled_from(["ok", "ok", "ok", "oom", "failed"]),
    "iterations": st.sampled_from([20, 20, 50]),
})
side_cells = st.lists(cell, min_size=0, max_size=10)


def side_frame(cells: list[dict[str, Any]], environment: str, start: float) -> pd.DataFrame:
    rows = []
    for i, c in enumerate(cells):
        values = c["values"] or [100.0]
        key = f"{environment}-{c['model']}-{c['precision']}-{c['batch_size']}-{i}"
        part = rows_for(key, values, start=start + 100 * i, environment=environment, status=c["status"],
                        model=c["model"], precision=c["precision"], batch_size=c["batch_size"])
        for r in part:
            r["raw"] = {"params": {"iterations": c["iterations"], "warmup": 5, "seed": 0}}
        rows.extend(part)
    if not rows:
        return pd.DataFrame(columns=frame_columns())
    df = long_frame(rows)
    return an.choose(df, PARAM_KEYS).frame  # one definition per cell, as a side compares


def old_pair_stats(sa: pd.DataFrame, sb: pd.DataFrame, keys: Sequence[str], unpaired: bool
                   ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """pair_stats as it was before it paired by the keys' values (pandas' outer merge, one astype), for the property:
    the judging itself (`_judged`) is the module's."""
    from runner.analysis.sidefacts import _sorted
    from runner.analysis.stats import THROTTLED

    keys = list(keys)
    pair_cols = compare_mod._pair_columns(keys)
    unpaired_cols = ["side", *keys, "environments", "statuses"]
    merged = sa.add_prefix("a_").rename(columns={f"a_{k}": k for k in keys}).merge(
        sb.add_prefix("b_").rename(columns={f"b_{k}": k for k in keys}),
        on=keys, how="outer", indicator=True, sort=False)
    both = merged[merged["_merge"] == "both"].copy()
    pairs = pd.DataFrame(columns=pair_cols) if both.empty else _sorted(compare_mod._judged(
        both, THROUGHPUT, 0.05, compare_mod.MIN_EFFECT, "environment" in keys))[pair_cols]
    rows = []
    for side, tag in (("A", "left_only"), ("B", "right_only")) if unpaired else ():
        part = merged[merged["_merge"] == tag]
        low = side.lower()
        rows.append(pd.DataFrame({"side": side, **{k: part[k] for k in keys},
                                  "environments": part[f"{low}_environments"],
                                  "statuses": part[f"{low}_statuses"], "_first": part[f"{low}__first"]}))
    alone = pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()
    alone = _sorted(alone, ["side"])[unpaired_cols] if not alone.empty else pd.DataFrame(columns=unpaired_cols)
    ints = dict.fromkeys(("batch_size", "gpus", "nodes"), int)
    throttled = [f"{side}_{THROTTLED}" for side in "ab"]
    pairs[throttled] = pairs[throttled].fillna(0)
    pairs = pairs.astype({"significant": bool, "a_n": int, "b_n": int, **dict.fromkeys(throttled, int), **ints})
    alone = alone.astype(ints)
    return pairs.reset_index(drop=True), alone.reset_index(drop=True)


def both_ways(sa: pd.DataFrame, sb: pd.DataFrame, keys: Sequence[str], unpaired: bool) -> None:
    """The new pairing, the merge kept for odd keys and the code before: the same frames, types and order."""
    fast = an.pair_stats(sa, sb, THROUGHPUT, keys=keys, unpaired=unpaired)
    merged = compare_mod._merged_pair_stats(sa, sb, THROUGHPUT, 0.05, compare_mod.MIN_EFFECT, list(keys), unpaired)
    before = old_pair_stats(sa, sb, keys, unpaired)
    for x, y, z in zip(fast, merged, before, strict=True):
        assert list(x.columns) == list(y.columns) == list(z.columns)
        pd.testing.assert_frame_equal(x, y, check_exact=True)
        pd.testing.assert_frame_equal(x, z, check_exact=True)


@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=side_cells, b=side_cells, unpaired=st.booleans(), collide=st.booleans())
def test_pairs_by_key_equal_the_merge(a: list[dict[str, Any]], b: list[dict[str, Any]], unpaired: bool,
                                      collide: bool) -> None:
    fa = side_frame(a, "envA", 1000.0)
    fb = side_frame(b, "envB", 1000.0 if collide else 9000.0)  # the same repeat ids on both sides, or apart
    if fa.empty or fb.empty:
        return
    sa, sb = an.side_stats(fa, "throughput"), an.side_stats(fb, "throughput")
    assert compare_mod._paired_rows(sa, sb, list(PARAM_KEYS)) is not None  # side_stats' cells take the new way
    both_ways(sa, sb, PARAM_KEYS, unpaired)
    # Keyed on the environment too, as two machines are: nothing pairs across two environments' names.
    ca, cb = (an.side_stats(f, "throughput", an.CELL_KEYS) for f in (fa, fb))
    both_ways(ca, cb, an.CELL_KEYS, unpaired)
    both_ways(ca, ca.iloc[::-1].reset_index(drop=True), an.CELL_KEYS, unpaired)
    # Two environments on one side, every cell's first repeat the same id: the pairs tie on every column the report
    # orders by, and keep the merge's order (the keys', environment first).
    two = an.side_stats(pd.concat([fa, fb], ignore_index=True), "throughput", an.CELL_KEYS)
    both_ways(two.iloc[::-1].reset_index(drop=True).assign(_first=7), two, an.CELL_KEYS, unpaired)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cells=side_cells)
def test_precision_pairs_equal_the_merge(cells: list[dict[str, Any]]) -> None:
    """A report's precision pairs: one environment's fp32 cells against each other precision's, on the other keys."""
    f = side_frame(cells, "env", 1000.0)
    if f.empty:
        return
    st_ = an.side_stats(f, "throughput", PARAM_KEYS)
    base = st_[st_["precision"] == BASELINE_PRECISION].drop(columns="precision").reset_index(drop=True)
    for p in ("fp16", "bf16", "amp"):
        other = st_[st_["precision"] == p].drop(columns="precision").reset_index(drop=True)
        both_ways(base, other, NO_PRECISION, False)
        both_ways(base, other, NO_PRECISION, True)


def test_ties_categories_and_empty_sides_as_before() -> None:
    """Cells whose first repeats tie, unpaired on a side of three environments (the merge's order, by the keys);
    categorical keys (sorted in their categories' order: not plain); a side with no cell, its columns typed object."""
    def one(model: str) -> dict[str, Any]:
        return {"model": model, "precision": "fp32", "batch_size": 32, "values": [1.0, 2.0], "status": "ok",
                "iterations": 20}

    three = pd.concat([side_frame([one("m")], env, 1000.0 + 100 * i) for i, env in enumerate(["zeta", "alpha", "mid"])],
                      ignore_index=True)
    sa = an.side_stats(three, "throughput", an.CELL_KEYS).assign(_first=7)
    sb = an.side_stats(side_frame([one("other")], "x", 5000.0), "throughput", an.CELL_KEYS)
    both_ways(sa, sb, an.CELL_KEYS, True)
    assert an.pair_stats(sa, sb, THROUGHPUT, keys=an.CELL_KEYS)[1]["environment"].tolist() == ["alpha", "mid", "zeta",
                                                                                                "x"]
    s2 = an.side_stats(side_frame([one("vgg"), one("alexnet"), one("resnet")], "e", 1000.0), "throughput")
    cat = s2.assign(model=s2["model"].astype(pd.CategoricalDtype(["vgg", "resnet", "alexnet"])))
    assert compare_mod._paired_rows(cat, cat, list(PARAM_KEYS)) is None
    both_ways(cat, cat, PARAM_KEYS, True)
    empty = s2.iloc[0:0].astype(object).assign(_first=pd.Series([], dtype=np.int64))
    both_ways(empty, s2, PARAM_KEYS, True)
    both_ways(s2, empty, PARAM_KEYS, True)


def test_keys_that_are_not_plain_go_through_the_merge() -> None:
    """A missing key, a float key or a key held twice on a side: pandas' merge pairs them, as before."""
    f = side_frame([{"model": "m", "precision": "fp32", "batch_size": 32, "values": [1.0, 2.0], "status": "ok",
                     "iterations": 20},
                    {"model": "m", "precision": "fp16", "batch_size": 64, "values": [3.0, 3.5], "status": "ok",
                     "iterations": 20}], "e", 1000.0)
    sa = an.side_stats(f, "throughput")
    keys = list(PARAM_KEYS)
    assert compare_mod._paired_rows(sa, sa, keys) is not None
    missing = sa.assign(options=[None, "x"])
    floats = sa.assign(batch_size=sa["batch_size"].astype(float))
    twice = pd.concat([sa, sa.iloc[:1]], ignore_index=True)
    mixed = sa.assign(model=["m", 3])
    for odd in (missing, floats, twice, mixed):
        assert compare_mod._paired_rows(odd, sa, keys) is None
        fast = an.pair_stats(odd, sa, THROUGHPUT)
        merged = compare_mod._merged_pair_stats(odd, sa, THROUGHPUT, 0.05, compare_mod.MIN_EFFECT, keys, True)
        for x, y in zip(fast, merged, strict=True):
            pd.testing.assert_frame_equal(x, y, check_exact=True)


def test_no_pairs_and_empty_sides() -> None:
    f = side_frame([{"model": "m", "precision": "fp32", "batch_size": 32, "values": [1.0, 2.0], "status": "ok",
                     "iterations": 20}], "e", 1000.0)
    g = side_frame([{"model": "n", "precision": "fp32", "batch_size": 32, "values": [1.0, 2.0], "status": "ok",
                     "iterations": 20}], "e", 5000.0)
    sa, sb = an.side_stats(f, "throughput"), an.side_stats(g, "throughput")
    for x, y in ((sa, sb), (sa.iloc[0:0], sb), (sa.iloc[0:0], sb.iloc[0:0])):
        for unpaired in (True, False):
            both_ways(x, y, PARAM_KEYS, unpaired)
    pairs, alone = an.pair_stats(sa, sb, THROUGHPUT)
    assert pairs.empty and alone["side"].tolist() == ["A", "B"] and alone["batch_size"].dtype == np.int64


def old_precision_ratios(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """precision_ratios as it was (a pandas aggregation with a Python function per group), for the property below."""
    from runner.analysis.comparable import definition_text, why_not
    from runner.analysis.frame import present
    from runner.analysis.sidefacts import _sorted
    from runner.domain.outcomes import Status

    keys = [k for k in PARAM_KEYS if k != "precision"]
    cols = ["side", *keys, "precision", "fp32_mean", "mean", "ratio", "why"]
    read = [*keys, "precision", HEADLINE, f"how_{HEADLINE}", f"unit_{HEADLINE}", "id", "settings"]
    ok = df.loc[(df["status"] == Status.OK.value) & df[HEADLINE].notna(), present(df, read)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    ok = ok.assign(_def=[definition_text(h, u) for h, u in zip(ok[f"how_{HEADLINE}"], ok[f"unit_{HEADLINE}"],
                                                                 strict=True)])
    means = ok.groupby([*keys, "precision"], sort=False, dropna=False).agg(
        mean=(HEADLINE, "mean"), _first=("id", "min"), _def=("_def", _join_unique),
        _set=("settings", _join_unique)).reset_index()
    base = means[means["precision"] == BASELINE_PRECISION][[*keys, "mean", "_def", "_set"]]
    merged = means[means["precision"] != BASELINE_PRECISION].merge(base, on=keys, how="inner", suffixes=("", "32"))
    merged = merged.rename(columns={"mean32": "fp32_mean"})
    merged["why"] = [why_not(get_metric(HEADLINE), (s32, s), (d32, d)) for s32, s, d32, d in zip(
        merged["_set32"], merged["_set"], merged["_def32"], merged["_def"], strict=True)]
    merged["ratio"] = np.where(merged["why"] == "", merged["mean"] / merged["fp32_mean"], math.nan)
    merged["side"] = side
    return _sorted(merged)[cols].reset_index(drop=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cells=side_cells, pooled=st.booleans())
def test_precision_ratios_equal_the_aggregation(cells: list[dict[str, Any]], pooled: bool) -> None:
    f = side_frame(cells, "env", 1000.0)
    if f.empty:
        return
    if pooled:  # several definitions of a cell, and settings that differ between them
        f = pd.concat([f, f.assign(id=f["id"] + 10_000, settings=f["settings"] + " x")], ignore_index=True)
    pd.testing.assert_frame_equal(precision_ratios(f, "A"), old_precision_ratios(f, "A"), check_exact=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=side_cells, b=side_cells)
def test_a_side_takes_the_report_s_environment_facts_only_where_they_are_its_own(a: list[dict[str, Any]],
                                                                                 b: list[dict[str, Any]]) -> None:
    """The report's environment facts (environment_info over the rows it shows), given to each environment's side,
    are the facts the side would compute from its own rows."""
    from runner.analysis.sidefacts import environment_info
    from runner.report import pairs

    fa, fb = side_frame(a, "envA", 1000.0), side_frame(b, "envB", 9000.0)
    if fa.empty or fb.empty:
        return
    shown = an.choose(pd.concat([fa, fb], ignore_index=True), an.CELL_KEYS).frame
    fam = pairs.families(shown, an.summarize(shown), info=environment_info(shown))
    assert set(fam.sides) == {"envA", "envB"}
    for side in fam.sides.values():
        assert "info" in side._cache
        pd.testing.assert_frame_equal(side.info("A"), environment_info(side.chosen).assign(side="A"), check_exact=True)
