"""Decisions that know what they do not know: pass only where the interval of the change rules a change beyond the
threshold out, fail beyond it and significant, undecided otherwise with what would decide it; one change per pair
(B/A) from which the table, the gate and the JSON all derive; every interval of a positive figure above 0."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runner import analysis as an
from runner.analysis import change, gate, significance
from runner.analysis.verdict import Verdict
from runner.report.render import compare_json
from tests.analysis.helpers import long_frame, rows_for


def sides(a: list[float], b: list[float]) -> tuple[object, object]:
    return (long_frame(rows_for("k", a, environment="A")),
            long_frame(rows_for("k", b, environment="B", run_id="r2", start=2000.0)))


def both(a: list[float], b: list[float], rule: str = "slower:3%") -> tuple[gate.GateCheck, dict, dict]:
    """The gate's check, compare's pair and compare's JSON pair for one pair of samples."""
    fa, fb = sides(a, b)
    (check,) = gate.evaluate(fa, fb, gate.parse_rules([rule]))
    df = long_frame(rows_for("k", a, environment="A"), rows_for("k", b, environment="B", run_id="r2", start=2000.0))
    comparison = an.compare(an.select_side(df, "A"), an.select_side(df, "B"), min_effect=check.rule.threshold)
    (pair,) = comparison.pairs.to_dict("records")
    (doc,) = json.loads(compare_json(comparison))["pairs"]
    return check, pair, doc


def test_a_large_slowdown_that_is_not_yet_significant_is_undecided_and_says_what_would_decide_it() -> None:
    """The README's gate example: B 2.67x slower at p about 0.05 with five repeats a side said "Gate passed"."""
    a = [600.0, 80.0, 420.0, 150.0, 90.0]
    b = [60.0, 180.0, 95.0, 70.0, 85.0]
    check, pair, _ = both(a, b)
    assert check.p_value > 0.05 and check.change > 1.0  # far beyond the threshold, not significant
    assert check.verdict is Verdict.UNDECIDED and not check.tripped
    assert "slower (95%)" in check.reason and "repeats a side would decide" in check.reason
    assert check.needed is not None and check.needed > 5
    assert gate.summary_line(gate.parse_rules(["slower:3%"]), [check]).startswith("Gate undecided")
    assert pair["decision"] == "undecided" and "would decide" in pair["verdict"]
    # The estimate is what it says: the same means and spreads with that many repeats a side decide it.
    mean_a, sd_a, mean_b, sd_b = np.mean(a), np.std(a, ddof=1), np.mean(b), np.std(b, ddof=1)
    n = check.needed
    grown = change.of_stats(mean_a, sd_a, n, mean_b, sd_b, n)
    p = float(significance.welch_from_stats(mean_a, sd_a, n, mean_b, sd_b, n))
    assert change.judge(grown, 0.03, -1, p, 0.05, an.METRICS["throughput"]).verdict is Verdict.FAIL
    fewer = change.of_stats(mean_a, sd_a, n - 1, mean_b, sd_b, n - 1)
    assert change.judge(fewer, 0.03, -1, 1.0, 0.05, an.METRICS["throughput"]).verdict is Verdict.UNDECIDED


def test_pass_needs_the_whole_interval_inside_the_threshold() -> None:
    rng = np.random.default_rng(7)
    base = 100 + rng.normal(0, 0.3, 6)
    check, pair, _ = both(list(base), list(base / 1.01))  # 1% slower, tight: its interval is inside 3%
    assert check.verdict is Verdict.PASS and check.delta.toward(-1)[2] < 0.03
    assert "slower (95%): within 3.0%" in check.reason
    assert pair["decision"] == "pass" and pair["verdict"] == "same (within ±3%)"
    wide = 100 + rng.normal(0, 4.0, 3)
    check, pair, _ = both(list(wide), list(wide / 1.01))  # the same 1% under a 4% spread: nothing ruled out
    assert check.verdict is Verdict.UNDECIDED and check.delta.toward(-1)[2] > 0.03
    assert pair["decision"] == "undecided"


@pytest.mark.parametrize("b_mean", [0.0, 1e-300, 5e-324, 1e-310, math.inf])
def test_an_extreme_pair_gets_one_verdict_in_table_gate_and_json(b_mean: float) -> None:
    """A side averaging 0, 1e-300, a subnormal or inf: the table said undecided where the gate said "fail ... inf%",
    and `--format json` crashed on inf. One ratio (B/A), one verdict, a document that serialises."""
    a = [100.0, 101.0, 99.0]
    b = [b_mean, b_mean, b_mean]
    check, pair, doc = both(a, b)
    assert check.verdict is Verdict.UNDECIDED and pair["decision"] == "undecided" == doc["decision"]
    assert math.isnan(pair["ratio"]) and doc["ratio"] is None
    text = gate.to_json("A", "B", gate.parse_rules(["slower:3%"]), [check])
    assert json.loads(text)["checks"][0]["verdict"] == "undecided"


def test_a_ratio_too_extreme_to_size_is_no_ratio_anywhere() -> None:
    assert math.isnan(change.ratio_of(1e-300, 1e10)) and math.isnan(change.ratio_of(1.0, 5e-324))
    assert change.ratio_of(2.0, 3.0) == 1.5
    # Admission keeps such figures out of a store (a figure of less than one item in its window); the core says so
    # in one sentence where two means get there anyway, for compare, the gate and bisect alike.
    why = an.comparable.no_ratio(an.METRICS["peak_mem"], 1e-300, 1e10)
    assert why.startswith("not tested:") and "too extreme to size" in why
    assert an.comparable.no_ratio(an.METRICS["peak_mem"], 1.0, 2.0) == ""


def test_compare_the_gate_and_the_rule_change_read_one_ratio() -> None:
    rule = gate.parse_rules(["slower:3%"])[0]
    assert rule.change(100.0, 80.0) == pytest.approx(0.25)  # A/B - 1: B's throughput 20% lower is 25% slower
    assert gate.parse_rules(["memory:5%"])[0].change(100.0, 110.0) == pytest.approx(0.10)
    assert math.isnan(rule.change(100.0, 0.0)) and math.isnan(rule.change(1e-300, 1e10))


@pytest.mark.parametrize("values", [[1.0, 50.0, 400.0], [1.5, 1.6, 900.0], [3.0, 3000.0]])
def test_every_interval_of_a_positive_figure_stays_above_zero(values: list[float]) -> None:
    st = an.describe(values, True)
    assert 0 < st.ci_low < st.mean < st.ci_high
    assert an.describe([-1.0, 5.0, 9.0]).ci_low < 0  # a figure that may be negative keeps its t interval
    df = long_frame(rows_for("k", values, environment="A"))
    summary = an.summarize(df)
    assert (summary["throughput_ci_low"] > 0).all() and (summary["throughput_ci_high"] > summary["throughput_mean"]).all()
    lo, hi = significance.ratio_interval(values, [v * 2 for v in values])
    assert 0 < lo < 2 < hi


def test_a_reference_passes_only_when_the_interval_is_inside_the_bound() -> None:
    st = an.describe([109, 110, 111, 110, 110], True)
    inside = change.bound_test(st.mean, st.std, st.n, 100.0, math.inf, (st.ci_low, st.ci_high), True)
    assert inside.verdict is Verdict.PASS
    st = an.describe([130.0, 60.0, 140.0], True)  # mean 110 above 100, but the interval reaches below it
    across = change.bound_test(st.mean, st.std, st.n, 100.0, math.inf, (st.ci_low, st.ci_high), True)
    assert across.verdict is Verdict.UNDECIDED and across.needed is not None and across.needed > 3
    st = an.describe([80.0, 81.0, 79.0], True)
    below = change.bound_test(st.mean, st.std, st.n, 100.0, math.inf, (st.ci_low, st.ci_high), True)
    assert below.verdict is Verdict.FAIL and below.p_value < 0.01
    one = change.bound_test(110.0, math.nan, 1, 100.0, math.inf, (math.nan, math.nan), True)
    assert one.verdict is Verdict.UNDECIDED and "a test needs 2+" in one.why


def test_the_repeats_estimate_is_none_where_no_number_would_do() -> None:
    at_threshold = change.Change(1 / 1.03, 0.9, 1.05, 3, 3, 0.05, 0.05)
    assert change.needed(at_threshold, 0.03, -1) is None
    assert change.needed(change.Change(0.9, 0.8, 1.0, 1, 1), 0.03, -1) is None  # no spread known on either side
    assert change.needed(change.Change(0.5, 0.3, 0.9, 3, 3, 0.3, 0.3), 0.03, -1) == 4
