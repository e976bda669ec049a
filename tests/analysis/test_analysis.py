"""The statistics against values worked out by hand (or from the textbook formula), not from our own code."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from runner import analysis as an
from runner.analysis import change, significance
from runner.analysis.verdict import Verdict
from runner.base.errors import ConfigError
from runner.store import Store

IDS = itertools.count(1)


def row(env: str, repeat: int, throughput: float | None, status: str = "ok", precision: str = "fp32",
        batch_size: int = 64, gpus: int = 1, tags: tuple[str, ...] = (), backend: str = "local",
        run_id: str = "run-1", **metrics: Any) -> dict[str, Any]:
    """A store row as Store.rows() yields it."""
    params = {"model": "mlp", "precision": precision, "batch_size": batch_size, "dataset": "synthetic",
              "gpus": gpus, "nodes": 1}
    m = {} if throughput is None else {"throughput": throughput, **metrics}
    return {"id": next(IDS), "run_id": run_id, "cell_key": f"{env}-{precision}-{batch_size}-{gpus}",
            "repeat": repeat, "environment": env, "backend": backend, "tags": list(tags), "params": params,
            "status": status, "reason": "" if status == "ok" else status, "metrics": m, "env": {},
            "raw": None, "log_tail": "", "started_at": 0.0, "finished_at": 1.0}

A = [100.0, 110.0, 120.0]
B = [130.0, 125.0, 135.0, 140.0]


def two_sides() -> Any:
    rows = [row("a", i, v, tags=("box",)) for i, v in enumerate(A)]
    rows += [row("b", i, v, tags=("cloud",), backend="docker", run_id="run-2") for i, v in enumerate(B)]
    return an.frame(an.StoredRepeat.many(rows))


def test_describe_matches_hand_computed_values() -> None:
    s = an.describe(A)
    assert s.n == 3
    assert s.mean == pytest.approx(110.0)
    assert s.std == pytest.approx(10.0)           # sqrt(((-10)^2 + 0 + 10^2) / (3 - 1))
    assert s.cv == pytest.approx(10.0 / 110.0)
    assert (s.min, s.max, s.median) == (100.0, 120.0, 110.0)
    # Positive values: the interval on the log scale, log(110) +- t(0.975, df=2) * CV / sqrt(3), CV = 10/110:
    # 4.3026527 * 0.0909091 / 1.7320508 = 0.2258307; exp(-+0.2258307) * 110 = 87.79..., 137.86...
    assert s.ci_low == pytest.approx(110.0 * math.exp(-0.22583070107), rel=1e-8)
    assert s.ci_high == pytest.approx(110.0 * math.exp(0.22583070107), rel=1e-8)
    t = an.describe([-10.0, 0.0, 10.0])  # a figure that may be negative keeps the t interval
    assert (t.ci_low, t.ci_high) == pytest.approx((-24.8413771175, 24.8413771175), abs=1e-6)


def test_single_value_has_no_std_or_interval() -> None:
    s = an.describe([42.0])
    assert (s.n, s.mean, s.min, s.max) == (1, 42.0, 42.0, 42.0)
    assert math.isnan(s.std) and math.isnan(s.ci_low) and math.isnan(s.cv)


def test_summarize_per_cell_statistics_and_status_counts() -> None:
    rows = [row("a", i, v) for i, v in enumerate(A)]
    rows.append(row("a", 3, None, status="oom"))
    rows.append(row("a", 0, 50.0, precision="fp16"))          # a single repeat
    rows.append(row("a", 0, None, precision="bf16", status="unsupported"))
    summary = an.summarize(an.frame(an.StoredRepeat.many(rows)))
    by_prec = {r["precision"]: r for _, r in summary.iterrows()}
    fp32 = by_prec["fp32"]
    assert (fp32["n"], fp32["n_ok"], fp32["status"], fp32["statuses"]) == (4, 3, "partial", "3 ok, 1 oom")
    assert fp32["throughput_mean"] == pytest.approx(110.0)
    assert fp32["throughput_std"] == pytest.approx(10.0)
    assert fp32["throughput_median"] == pytest.approx(110.0)
    # A throughput's interval is on the log scale (runner.analysis.significance.mean_interval): never at or below 0.
    assert fp32["throughput_ci_high"] == pytest.approx(110.0 * math.exp(24.8413771175 / 110.0), rel=1e-8)
    assert fp32["throughput_ci_low"] == pytest.approx(110.0 * math.exp(-24.8413771175 / 110.0), rel=1e-8)
    fp16 = by_prec["fp16"]
    assert fp16["throughput_n"] == 1 and math.isnan(fp16["throughput_std"]) and math.isnan(fp16["throughput_ci_low"])
    bf16 = by_prec["bf16"]
    assert (bf16["status"], bf16["n_ok"], bf16["statuses"]) == ("unsupported", 0, "1 unsupported")
    assert bf16["reason"] == "unsupported"
    # fp32 first (the order of runner.domain.cells.PRECISIONS), nothing dropped.
    assert list(summary["precision"]) == ["fp32", "fp16", "bf16"]


def test_iteration_time_and_data_wait_come_from_the_raw_metrics() -> None:
    r = row("a", 0, 100.0, iter_times=[0.1, 0.2, 0.3], window_s=0.6, data_wait_s=0.15,
            peak_mem_allocated=2**30)
    df = an.frame(an.StoredRepeat.many([r]))
    assert df["iter_time"].iloc[0] == pytest.approx(0.2)
    assert df["data_wait"].iloc[0] == pytest.approx(0.25)
    assert df["peak_mem"].iloc[0] == 2**30


def welch_by_formula(a: list[float], b: list[float]) -> float:
    """Welch's t-test from its definition: t on unpooled variances, Welch–Satterthwaite degrees of freedom."""
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    t = (np.mean(b) - np.mean(a)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return float(2 * stats.t.sf(abs(t), df))


def welch_log_by_formula(a: list[float], b: list[float]) -> float:
    """Welch's test on the log scale by the delta method, as a ratio's interval is made: t = log(mean b / mean a)
    over sqrt(cv_a^2/n_a + cv_b^2/n_b), Welch–Satterthwaite degrees of freedom on those terms."""
    va = (np.std(a, ddof=1) / np.mean(a)) ** 2 / len(a)
    vb = (np.std(b, ddof=1) / np.mean(b)) ** 2 / len(b)
    t = math.log(np.mean(b) / np.mean(a)) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return float(2 * stats.t.sf(abs(t), df))


def test_welch_p_value_matches_the_formula() -> None:
    # By hand: t = 22.5 / sqrt(100/3 + 125/12) = 3.4017, df = 3.2347, p = 0.03782
    assert welch_by_formula(A, B) == pytest.approx(0.0378150822, abs=1e-8)
    # Two positive means (a throughput): the test is made on the log scale, so its p < 0.05 exactly when the
    # interval of B/A leaves 1 out. t = log(132.5/110) / sqrt((10/110)^2/3 + (11.18/132.5)^2/4), p = 0.0519.
    p = an.welch_from_stats(np.mean(A), np.std(A, ddof=1), len(A), np.mean(B), np.std(B, ddof=1), len(B))
    assert float(p) == pytest.approx(welch_log_by_formula(A, B), rel=1e-9)
    assert float(p) == pytest.approx(0.0519485, abs=1e-6)
    lo, hi = significance.ratio_interval_stats(np.mean(A), np.std(A, ddof=1), len(A), np.mean(B), np.std(B, ddof=1), len(B))
    assert (lo <= 1.0 <= hi) == (float(p) >= 0.05)
    # A figure that may be negative keeps the plain test.
    neg_a, neg_b = [x - 1000.0 for x in A], [x - 1000.0 for x in B]
    q = an.welch_from_stats(np.mean(neg_a), np.std(neg_a, ddof=1), len(A), np.mean(neg_b), np.std(neg_b, ddof=1),
                            len(B))
    assert float(q) == pytest.approx(welch_by_formula(A, B), rel=1e-9)
    assert math.isnan(float(an.welch_from_stats(1.0, math.nan, 1, np.mean(B), np.std(B, ddof=1), len(B))))
    # No spread on either side is certain, not untestable: equal means p = 1, different means p = 0.
    assert float(an.welch_from_stats(5.0, 0.0, 3, 5.0, 0.0, 3)) == 1.0
    assert float(an.welch_from_stats(5.0, 0.0, 3, 6.0, 0.0, 3)) == 0.0


def test_geometric_mean() -> None:
    assert an.geometric_mean([2.0, 0.5, 1.0]) == pytest.approx(1.0)
    assert an.geometric_mean([1.1, 1.2]) == pytest.approx(math.sqrt(1.32))
    assert an.geometric_mean([1.5, float("nan"), 0.0]) == pytest.approx(1.5)
    assert math.isnan(an.geometric_mean([]))


def test_compare_pairs_ratio_verdict_and_geomean() -> None:
    df = two_sides()
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    assert len(c.pairs) == 1 and c.unpaired.empty
    p = c.pairs.iloc[0]
    assert p["ratio"] == pytest.approx(132.5 / 110.0)
    assert p["change"] == "1.20x faster"
    assert p["p_value"] == pytest.approx(welch_log_by_formula(A, B), rel=1e-9)
    # p = 0.052 and the interval of B/A, 0.997-1.455, reaches no change: undecided, never "passed", with what decides.
    assert (p["ratio_low"], p["ratio_high"]) == pytest.approx((0.99698, 1.45533), abs=1e-5)
    assert not bool(p["significant"]) and p["decision"] == "undecided" and p["needed"] == 5
    assert p["verdict"] == ("undecided: beyond ±2.0% but not significant (p=0.0519); "
                            "about 5 repeats a side would decide")
    assert c.geomean == pytest.approx(132.5 / 110.0)
    assert (c.geomean_low, c.geomean_high) == pytest.approx((p["ratio_low"], p["ratio_high"]))
    # Tighter sides: the same 1.20x is significant and its interval leaves 1 out: faster.
    rows = [row("a", i, v) for i, v in enumerate([109.5, 110.0, 110.5])]
    rows += [row("b", i, v, run_id="run-2") for i, v in enumerate([132.0, 132.5, 133.0, 132.5])]
    df = an.frame(an.StoredRepeat.many(rows))
    q = an.compare(an.select_side(df, "a"), an.select_side(df, "b")).pairs.iloc[0]
    assert q["verdict"] == "faster" and q["decision"] == "fail" and q["ratio_low"] > 1


def test_a_time_metric_reads_lower_as_faster() -> None:
    m = an.get_metric("time")
    assert an.change_words(0.5, m) == "2.00x faster"
    assert an.change_words(1.25, m) == "1.25x slower"
    assert an.change_words(1.25, an.get_metric("throughput")) == "1.25x faster"


def test_verdicts_say_not_significant_plainly() -> None:
    m = an.METRICS["throughput"]
    # A change beyond the threshold that the test cannot call is undecided, never a pass, and says what would decide.
    d = change.of_stats(100.0, 10.0, 3, 120.0, 10.0, 3)
    assert an.judge_pair(1.2, 0.2, 3, 3, m, delta=d)[:2] == (
        False, "undecided: beyond ±2.0% but not significant (p=0.2); about 4 repeats a side would decide")
    # Without spread there is no estimate, and the words say why (not "it sits at the threshold").
    assert an.judge_pair(1.2, 0.2, 3, 3, m)[1].endswith("no estimate of the repeats that would decide it "
                                                        "(the spread is unknown)")
    # Small but with no interval: nothing shows it the same.
    assert an.judge_pair(1.01, 0.0001, 3, 3, m)[1].startswith(
        "undecided: no interval of the change to show it within ±2%")
    # Same only where the interval lies inside ±2%.
    tight = change.of_stats(100.0, 0.1, 3, 100.5, 0.1, 3)
    assert an.judge_pair(1.005, 0.01, 3, 3, m, delta=tight)[:3] == (False, "same (within ±2%)", Verdict.PASS)
    assert an.judge_pair(0.9, 0.001, 3, 3, m)[:2] == (True, "slower")
    assert an.judge_pair(1.2, math.nan, 1, 3, m)[:2] == (
        False, "undecided: 1 ok repeat on A (a test needs 2+ per side)")
    assert an.judge_pair(math.nan, math.nan, 0, 3, m)[:2] == (False, "no result")
    assert an.judge_pair(1.2, math.nan, 1, 3, m)[2] is Verdict.UNDECIDED
    assert an.judge_pair(1.2, 0.2, 3, 3, m)[2] is Verdict.UNDECIDED
    assert an.judge_pair(0.9, 0.001, 3, 3, m)[2] is Verdict.FAIL


def test_sides_by_tag_backend_and_run_prefix() -> None:
    df = two_sides()
    assert an.select_side(df, "cloud").kind == "tag"
    assert an.select_side(df, "docker").kind == "backend"
    side = an.select_side(df, "run-2")
    assert side.kind == "run" and side.environments == ["b"]
    assert an.select_side(df, "tag:box").environments == ["a"]


def test_unknown_side_lists_what_exists() -> None:
    with pytest.raises(ConfigError) as e:
        an.select_side(two_sides(), "nowhere")
    msg = str(e.value)
    assert "nowhere" in msg and "env: a, b" in msg and "tag: box, cloud" in msg and "run: run-1, run-2" in msg


def test_overlapping_sides_are_refused() -> None:
    df = two_sides()
    with pytest.raises(ConfigError, match="same results"):
        an.compare(an.select_side(df, "a"), an.select_side(df, "box"))


def test_precision_ratio_and_scaling() -> None:
    rows = [row("a", i, v) for i, v in enumerate([100.0, 100.0])]
    rows += [row("a", i, v, precision="fp16") for i, v in enumerate([250.0, 250.0])]
    rows += [row("a", i, v, precision="fp16", gpus=4) for i, v in enumerate([900.0, 900.0])]
    df = an.frame(an.StoredRepeat.many(rows))
    ratios = an.precision_ratios(df)
    assert list(ratios["precision"]) == ["fp16"] and ratios["ratio"].iloc[0] == pytest.approx(2.5)
    scale = an.scaling(an.summarize(df))
    four = scale[scale["gpus"] == 4].iloc[0]
    assert four["speedup"] == pytest.approx(3.6) and four["efficiency"] == pytest.approx(0.9)


def test_fixture_store_statistics(db: Path) -> None:
    """The fixture's amp/128 cell on ngc-18.07: 2 ok repeats and 1 failed, statistics over the ok ones."""
    with Store(db) as store:
        df = an.frame(store.rows())
    cell = df[(df["environment"] == "ngc-18.07") & (df["precision"] == "amp") & (df["batch_size"] == 128)]
    ok = cell[cell["status"] == "ok"]["throughput"].to_numpy()
    assert len(cell) == 3 and len(ok) == 2
    summary = an.summarize(df)
    s = summary[(summary["environment"] == "ngc-18.07") & (summary["precision"] == "amp")
                & (summary["batch_size"] == 128)].iloc[0]
    assert s["statuses"] == "2 ok, 1 failed"
    assert s["throughput_mean"] == pytest.approx(ok.mean())
    assert s["throughput_std"] == pytest.approx(abs(ok[0] - ok[1]) / math.sqrt(2))  # ddof=1 with two values
    # t(0.975, 1) = 12.7062047...; a throughput's interval on the log scale: mean * exp(+-t * CV / sqrt(n)).
    half = 12.706204736174698 * s["throughput_std"] / math.sqrt(2) / s["throughput_mean"]
    assert s["throughput_ci_high"] == pytest.approx(s["throughput_mean"] * math.exp(half), rel=1e-9)
    assert s["throughput_ci_low"] == pytest.approx(s["throughput_mean"] * math.exp(-half), rel=1e-9)
    assert s["throughput_ci_low"] > 0


def test_quality_flags_name_noisy_and_data_bound_cells() -> None:
    rows = [row("a", i, v, window_s=1.0, data_wait_s=0.01) for i, v in enumerate([100.0, 101.0, 99.0])]
    rows += [row("a", i, v, precision="fp16", window_s=1.0, data_wait_s=0.01)
             for i, v in enumerate([100.0, 150.0])]                          # CV = 35.36 / 125 = 28%
    rows += [row("a", i, v, precision="bf16", window_s=1.0, data_wait_s=0.25)
             for i, v in enumerate([100.0, 100.0])]                          # a quarter of the window waiting
    flags = an.quality_flags(an.summarize(an.frame(an.StoredRepeat.many(rows))))
    assert sorted(zip(flags["precision"], flags["flag"], strict=True)) == [("bf16", "data-bound"),
                                                                           ("fp16", "noisy")]
    noisy = flags[flags["flag"] == "noisy"].iloc[0]
    assert noisy["value"] == pytest.approx(np.std([100.0, 150.0], ddof=1) / 125.0)
    from runner.report.views import warnings
    text = " ".join(warnings(flags))
    assert "In 1 cell throughput varies by more than 10%" in text and "(28%)" in text
    assert "waiting for more than 10%" in text and "(25%)" in text


def test_vectorised_welch_matches_scipy_ttest() -> None:
    rng = np.random.default_rng(7)
    for n_a, n_b in ((2, 2), (3, 5), (10, 4), (30, 30)):
        # Figures that may be negative: scipy's Welch test itself.
        a, b = rng.normal(-50, 5, n_a), rng.normal(-47, 9, n_b)
        expected = stats.ttest_ind(a, b, equal_var=False).pvalue
        got = an.welch_from_stats(a.mean(), a.std(ddof=1), n_a, b.mean(), b.std(ddof=1), n_b)
        assert float(got) == pytest.approx(expected, rel=1e-9)
        # Positive figures: the log-scale formula, and the vectorised and scalar paths agree.
        a, b = rng.normal(100, 5, n_a), rng.normal(103, 9, n_b)
        got = an.welch_from_stats(a.mean(), a.std(ddof=1), n_a, b.mean(), b.std(ddof=1), n_b)
        assert float(got) == pytest.approx(welch_log_by_formula(list(a), list(b)), rel=1e-9)
        one = significance._welch_one(a.mean(), a.std(ddof=1), n_a, b.mean(), b.std(ddof=1), n_b)
        assert one == pytest.approx(float(got), rel=1e-9)
    assert float(an.welch_from_stats(1.0, 0.0, 3, 1.0, 0.0, 3)) == 1.0   # no spread, same: certain


def _record(**kw: Any) -> dict[str, Any]:
    """A bench "precision" record (bench.precision_record's keys) with fp32-on-GPU defaults."""
    rec = {"mechanism": "none", "dtype": "float32", "loss_scale": None, "tf32_matmul": False, "tf32_cudnn": False,
           "channels_last": False, "cudnn_benchmark": False, "compile": False, "autocast": False,
           "master_weights": False, "bn_fp32": False, "optimizer": "sgd-momentum-0.9-fused"}
    rec.update(kw)
    return rec


@pytest.mark.parametrize(("precision", "record", "words"), [
    ("fp32", _record(), "all fp32 · TF32 off · SGD, fused"),
    ("tf32", _record(dtype="tf32", tf32_matmul=True, tf32_cudnn=True), "fp32 weights, TF32 math · TF32 on · SGD, fused"),
    ("amp", _record(mechanism="native", dtype="float16", loss_scale="dynamic", autocast=True, tf32_matmul=True,
                    tf32_cudnn=False, channels_last=True, cudnn_benchmark=True),
     "autocast fp16 · loss scale dynamic · TF32 matmul on, cuDNN off · channels_last, cudnn.benchmark · SGD, fused"),
    ("amp", _record(mechanism="apex", dtype="float16", loss_scale="dynamic", apex_api="initialize(O1)",
                    optimizer="sgd-momentum-0.9-default"),
     "apex amp initialize(O1) · loss scale dynamic · TF32 off · SGD"),
    ("amp", _record(mechanism="manual", dtype="float16", loss_scale=256.0, master_weights=True, bn_fp32=True),
     "fp16 model, fp32 master weights, BN in fp32 · loss scale static 256 · TF32 off · SGD, fused"),
    ("amp-bf16", _record(mechanism="native", dtype="bfloat16", tf32_matmul=None, tf32_cudnn=None, compile=True,
                         optimizer="sgd-momentum-0.9-default"),
     "autocast bf16 · torch.compile · SGD"),
    ("bf16", _record(dtype="bfloat16", tf32_matmul=None, tf32_cudnn=None), "all bf16 · SGD, fused"),
])
def test_recipe_says_how_a_precision_ran(precision: str, record: dict[str, Any], words: str) -> None:
    assert an.recipe_text(an.recipe(record, precision)) == words


def test_recipe_without_a_record_is_empty() -> None:
    assert an.recipe_text(an.recipe(None, "amp")) == ""
    assert an.recipe_text(an.recipe(_record(dtype=None), "amp-bf16")) == ""  # unsupported before a plan


def _with_record(r: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {**r, "raw": {"precision": _record(**kw)}}


def test_recipes_per_environment_and_the_precisions_that_ran_differently() -> None:
    manual = {"mechanism": "manual", "dtype": "float16", "loss_scale": 128.0, "bn_fp32": True}
    native = {"mechanism": "native", "dtype": "float16", "loss_scale": "dynamic", "autocast": True}
    rows = [_with_record(row("old", i, 100.0, precision="amp"), **manual) for i in range(2)]
    rows += [_with_record(row("old", i, 50.0), ) for i in range(2)]
    rows += [_with_record(row("new", i, 300.0, precision="amp", run_id="run-2"), **native) for i in range(2)]
    rows += [_with_record(row("new", i, 90.0, run_id="run-2")) for i in range(2)]
    rows += [row("new", 0, None, status="failed", precision="fp16", run_id="run-2")]  # no bench JSON: no recipe
    df = an.frame(an.StoredRepeat.many(rows))
    recipes = an.precision_recipes(df)
    assert list(zip(recipes["environment"], recipes["precision"], recipes["cells"], strict=True)) == [
        ("old", "fp32", 1), ("old", "amp", 1), ("new", "fp32", 1), ("new", "amp", 1)]
    assert recipes.loc[1, "recipe_loss_scale"] == "static 128"
    c = an.compare(an.select_side(df, "old"), an.select_side(df, "new"))
    assert list(c.recipes["precision"]) == ["amp"]  # fp32 ran the same way on both sides
    assert c.recipes.loc[0, "a"].startswith("fp16 model, fp32 master weights")
    assert c.recipes.loc[0, "b"].startswith("autocast fp16 · loss scale dynamic")


def test_ideal_scaling_line_starts_at_the_smallest_layout() -> None:
    from runner.report.charts import ideal_lines

    base = {"environment": "e", "model": "m", "precision": "fp32", "batch_size": 8, "dataset": "s", "options": ""}
    scale = pd.DataFrame([{**base, "processes": p} for p in (2, 4)])
    assert [(e["processes"], e["speedup"]) for e in ideal_lines(scale)] == [(2, 1.0), (4, 2.0)]  # not y = x from 1
    one = pd.DataFrame([{**base, "model": "n", "processes": p} for p in (1, 2)])
    ends = ideal_lines(pd.concat([scale, one]))
    assert [(e["base"], e["processes"]) for e in ends] == [(1, 1), (1, 4), (2, 2), (2, 4)]


def test_ok_on_one_side_and_failed_on_the_other_is_a_regression_not_no_result() -> None:
    def change(a: str, b: str) -> tuple[Verdict, str] | None:
        c = an.outcome_change(an.Outcomes.parse(a), an.Outcomes.parse(b))
        return None if c is None else (c.verdict, c.why)

    assert change("3 ok", "2 failed, 1 oom") == (Verdict.FAIL, "regression: B 1 oom, 2 failed (A 3 ok)")
    assert change("3 not_started", "3 ok") == (Verdict.FAIL, "fixed: A 3 not_started (B 3 ok)")
    # B can no longer run what A ran: a change of outcome in every command (bisect calls it a step too)
    assert change("3 ok", "3 unsupported") == (Verdict.FAIL, "regression: B 3 unsupported (A 3 ok)")
    assert change("3 failed", "3 failed") == (Verdict.PASS, "failed on both sides")
    assert change("3 ok", "3 ok") is None
    ok = {"status": "ok", "metrics": {"throughput": 100.0}}
    rows = [{"id": i, "run_id": "r", "cell_key": f"{env}", "repeat": i % 3, "environment": env,
             "params": {"model": "m", "precision": "fp32", "batch_size": 8, "dataset": "synthetic"},
             **(ok if env == "a" else {"status": "failed", "reason": "boom", "metrics": {}})}
            for i, env in enumerate(["a"] * 3 + ["b"] * 3)]
    df = an.frame(an.StoredRepeat.many(rows))
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    pair = c.pairs.iloc[0]
    assert pair["verdict"] == "regression: B 3 failed (A 3 ok)" and bool(pair["significant"]) and c.n_significant == 1


def test_scaling_across_nodes_with_forward_backward_from_the_breakdown() -> None:
    """The multi-node shape: nodes x ranks per node, forward/backward img/s from bench --breakdown,
    speedup and efficiency against the smallest layout, here two processes on one node."""
    def node_row(nodes: int, per_node: int, repeat: int, throughput: float, fwd_s: float, bwd_s: float) -> dict:
        r = row("slurm", repeat, throughput, gpus=per_node, images=640 * nodes * per_node,
                breakdown={"forward_s": fwd_s, "backward_s": bwd_s, "optimizer_s": 0.1})
        r["params"]["nodes"] = nodes
        r["cell_key"] = f"slurm-{nodes}-{per_node}"
        return r
    rows = [node_row(1, 2, i, 100.0 + i, 4.0, 8.0) for i in range(2)]
    rows += [node_row(3, 2, i, 240.0 + 2 * i, 6.0, 16.0) for i in range(2)]
    rows.append(row("plain", 0, 50.0))  # no breakdown: NaN, not zero
    df = an.frame(an.StoredRepeat.many(rows))
    assert df["fwd_throughput"].iloc[0] == pytest.approx(1280 / 4.0) and df["fwd_throughput"].isna().iloc[-1]
    scale = an.scaling(an.summarize(df))
    six = scale[scale["nodes"] == 3].iloc[0]
    assert six["processes"] == 6 and six["gpus"] == 2
    assert six["fwd_throughput_mean"] == pytest.approx(3840 / 6.0) and six["bwd_throughput_mean"] == pytest.approx(240.0)
    assert six["speedup"] == pytest.approx(241.0 / 100.5) and six["efficiency"] == pytest.approx(241.0 / 100.5 / 3)
    assert an.get_metric("forward").name == "fwd_throughput"


def test_cell_labels_call_cpu_ranks_ranks_and_gpu_ranks_gpus() -> None:
    from runner.report.labels import cell_label

    keys = ["model", "device", "gpus", "nodes"]
    cpu = pd.Series({"model": "resnet18", "device": "cpu", "gpus": 2, "nodes": 3})
    assert cell_label(cpu, keys) == "resnet18 · cpu · 2 ranks · 3 nodes"
    gpu = {"model": "resnet18", "device": "cuda", "gpus": 8, "nodes": 1}  # a record, as the warnings pass it
    assert cell_label(gpu, keys) == "resnet18 · cuda · 8 GPUs"
    in_options = {"model": "resnet18", "gpus": 2, "nodes": 1, "options": "breakdown=True device=cpu threads=1"}
    assert cell_label(in_options, ["model", "gpus", "options"]) == "resnet18 · 2 ranks · breakdown=True device=cpu threads=1"
    # The note under a table, when every row shares the layout, says the same.
    from runner.report.labels import constants_note

    assert constants_note(pd.DataFrame([in_options, in_options]), ["gpus", "nodes"]) == "2 ranks"
    assert constants_note(pd.DataFrame([gpu]), ["gpus"]) == "8 GPUs"


def test_pair_decisions_undecided_with_one_repeat_and_pass_when_unsupported_on_both_sides() -> None:
    rows = [row("a", 0, 100.0), row("b", 0, 50.0, run_id="run-2")]                       # one repeat a side
    rows += [row("a", i, None, precision="bf16", status="unsupported") for i in range(2)]
    rows += [row("b", i, None, precision="bf16", status="unsupported", run_id="run-2") for i in range(2)]
    df = an.frame(an.StoredRepeat.many(rows))
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    by_prec = {r["precision"]: r for r in c.pairs.to_dict("records")}
    assert by_prec["fp32"]["decision"] == "undecided" and not by_prec["fp32"]["significant"]
    assert by_prec["fp32"]["verdict"] == "undecided: 1 ok repeat on A and 1 ok repeat on B (a test needs 2+ per side)"
    assert (by_prec["bf16"]["decision"], by_prec["bf16"]["verdict"]) == ("pass", "unsupported on both sides")
    assert c.n_decision(Verdict.UNDECIDED) == 1 and c.n_tested == 0


def test_the_environments_table_names_each_container_runtime_and_its_version() -> None:
    """The same image under Podman and under Charliecloud: the report says which runtime produced each column."""
    from runner.report.views import environments_table

    rows = []
    for env, runtime, version in (("podman-env", "podman", "4.3.1"), ("ch-env", "charliecloud", "0.31"),
                                  ("metal", None, None)):
        for i in range(2):
            r = row(env, i, 100.0 + i, backend="slurm")
            r["env"] = {"torch": "2.13.0"} if runtime is None else {
                "torch": "2.13.0", "image": "matrix/debian-torch:1.13", "container_runtime": runtime,
                "container_runtime_version": version}
            rows.append(r)
    info = an.environment_info(an.frame(an.StoredRepeat.many(rows)))
    text = {row[0].text: [c.text for c in row[1:]] for row in environments_table(info).rows}
    assert text["container runtime"] == ["podman", "charliecloud", "—"], text
    assert text["runtime version"] == ["4.3.1", "0.31", "—"], text


def test_compare_never_pairs_two_definitions_of_a_metric() -> None:
    """The same program at the same speed, mllog's throughput from tracked_stats on A and from train_samples over
    the whole run on B: compare used to say `1000 ± 0 | 500.0 ± 0.0 | 2.00x slower | <0.001 | slower`."""
    def rows(env: str, value: float, how: str) -> list[dict]:
        return [{"id": i + (10 if env == "b" else 0), "run_id": env, "cell_key": env, "repeat": i, "environment": env,
                 "status": "ok", "params": {"model": "m", "precision": "fp32", "batch_size": 8, "dataset": "synthetic"},
                 "metrics": {"throughput": value, "definitions": {"throughput": {"how": how, "unit": "samples/s"}}}}
                for i in range(3)]
    df = an.frame(an.StoredRepeat.many(rows("a", 1000.0, "mllog: mean of tracked_stats")
                  + rows("b", 500.0, "mllog: train_samples / (run_stop - run_start)")))
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    pair = c.pairs.iloc[0]
    assert pair["decision"] == "undecided" and not bool(pair["significant"]) and math.isnan(pair["p_value"])
    assert pair["verdict"].startswith("not comparable: the throughput is obtained differently (mllog: mean of "
                                      "tracked_stats [samples/s] vs mllog: train_samples")
    assert math.isnan(c.geomean)


def test_a_window_shorter_than_the_run_settings_promised_is_refused_and_said() -> None:
    """Admission (runner/record/admission.py) refuses a repeat that measured fewer iterations than asked: the pair
    is undecided in words that say why, never compared as if the windows were alike."""
    def rows(env: str, window: int, start: int) -> list[dict]:
        return [{"id": start + i, "run_id": env, "cell_key": env, "repeat": i, "environment": env, "status": "ok",
                 "params": {"model": "m", "precision": "fp32", "batch_size": 8, "dataset": "synthetic"},
                 "metrics": {"throughput": 100.0 + i, "iterations": window},
                 "raw": {"params": {"iterations": 50, "warmup": 5, "seed": 0}}} for i in range(3)]
    df = an.frame(an.StoredRepeat.many(rows("a", 50, 0) + rows("b", 12, 10)))
    assert list(df["status"]) == ["ok"] * 3 + ["refused"] * 3
    assert set(df.loc[df["status"] == "refused", "reason"]) == {"measured 12 of the 50 iterations asked"}
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    (pair,) = c.pairs.to_dict("records")
    assert pair["decision"] == "undecided" and pair["verdict"].startswith("no admitted repeat on B (3 refused")


def test_the_pairs_table_labels_each_side_with_its_figures_unit() -> None:
    from runner.report.pairs import pairs_table

    def rows(env: str, start: int) -> list[dict]:
        return [{"id": start + i, "run_id": env, "cell_key": env, "repeat": i, "environment": env, "status": "ok",
                 "params": {"model": "m", "precision": "fp32", "batch_size": 8, "dataset": "synthetic"},
                 "metrics": {"throughput": 100.0 + i, "definitions": {"throughput": {
                     "how": "mllog: mean of tracked_stats", "unit": "samples/s"}}}} for i in range(3)]
    df = an.frame(an.StoredRepeat.many(rows("a", 0) + rows("b", 10)))
    c = an.compare(an.select_side(df, "a"), an.select_side(df, "b"))
    assert pairs_table(c, "a", "b").columns[-6:-4] == ["a (samples/s)", "b (samples/s)"]
