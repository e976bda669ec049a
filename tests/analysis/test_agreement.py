"""The agreement test: compare, the gate, bisect's pair test and the report's comparison view asked about the same
pair of cells must agree on whether it is comparable, on the p-value and on the verdict, because they all decide
through one core (runner/analysis/comparable.py, significance.py, verdict.py). Hypothesis generates the pair."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner import analysis as an
from runner.analysis import bisect_search as search
from runner.analysis import gate
from runner.analysis.verdict import Verdict
from runner.record.repeat import Repeat
from runner.record.stored import StoredRepeat
from runner.report.pairs import comparison_sections

PARAMS = {"model": "mnist_cnn", "precision": "fp32", "batch_size": 32, "dataset": "synthetic"}
HOWS = ("bench: items over the synchronised measured window", "mllog: mean of tracked_stats")
# Levels and noise away from the 2% boundary, so that a strict and a non-strict comparison cannot differ.
LEVELS = (100.0, 100.5, 120.0, 80.0, 0.0)  # 0: a mean of zero or below, no ratio
NOISE = (0.0, 0.0, 0.7, -0.4, 3.0, -2.5)


@st.composite
def side(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 6))
    statuses = draw(st.lists(st.sampled_from(["ok", "ok", "ok", "ok", "oom", "failed", "timeout", "diverged",
                                              "unsupported", "not_started"]), min_size=n, max_size=n))
    level = draw(st.sampled_from(LEVELS))
    noise = draw(st.lists(st.sampled_from(NOISE), min_size=n, max_size=n))
    return {"statuses": statuses, "values": [level + e for e in noise], "how": draw(st.sampled_from(HOWS[:1] * 4 + HOWS[1:])),
            "iterations": draw(st.sampled_from([20, 20, 20, 30]))}


def rows(env: str, s: dict[str, Any], start: int) -> list[dict[str, Any]]:
    out = []
    for i, (status, v) in enumerate(zip(s["statuses"], s["values"], strict=True)):
        metrics = {"throughput": v, "definitions": {"throughput": {"how": s["how"], "unit": "img/s"}}} \
            if status == "ok" else {}
        out.append({"id": start + i, "run_id": env, "cell_key": env, "repeat": i, "environment": env,
                    "backend": "local", "params": PARAMS, "status": status, "metrics": metrics,
                    "raw": {"params": {"iterations": s["iterations"], "warmup": 5, "seed": 0}},
                    "started_at": float(start + i)})
    return out


def sample(s: dict[str, Any], env: str = "X") -> search.Sample:
    """The pair test's view of a side, as `matrix bisect` builds it (runner/bisect/store_measure.py): each stored row read
    once as a Repeat, so admission has spoken (a throughput of 0 is refused, not an ok figure)."""
    repeats = [Repeat.of(StoredRepeat.of(r)) for r in rows(env, s, 0)]
    ok = [r.value("throughput") for r in repeats if r.ok]
    return search.Sample(tuple(r.status for r in repeats), tuple(v for v in ok if v is not None),
                         definition=an.comparable.definition_text(s["how"], "img/s") if ok else "")


def same_p(*ps: float | None) -> bool:
    vals = [math.nan if p is None else float(p) for p in ps]
    if all(math.isnan(p) for p in vals):
        return True
    return not any(math.isnan(p) for p in vals) and bool(np.allclose(vals, vals[0], rtol=1e-9, atol=1e-12))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=side(), b=side())
def test_every_command_decides_a_pair_the_same_way(a: dict[str, Any], b: dict[str, Any]) -> None:
    df = an.frame(an.StoredRepeat.many(rows("A", a, 0) + rows("B", b, 100)))
    if not len(df):
        return
    have_a, have_b = bool(a["statuses"]), bool(b["statuses"])
    rule = gate.Rule("slower", an.MIN_EFFECT)
    frame_a = df[df["environment"] == "A"]
    frame_b = df[df["environment"] == "B"]
    checks = gate.evaluate(frame_a, frame_b, [rule])
    if not have_a:
        assert checks == []  # nothing of A to check; B's cell is listed as unchecked
        assert gate.only_in_b(frame_a, frame_b)
        return
    (check,) = checks
    if not have_b:
        admitted_a = bool((frame_a["status"] != "refused").any())  # A's only repeats refused: A speaks first
        assert check.verdict is Verdict.UNDECIDED
        assert check.reason.startswith("not measured on B" if admitted_a else "no admitted repeat on A"), check.reason
        return
    comparison = an.compare(an.select_side(df, "A"), an.select_side(df, "B"))
    (pair,) = comparison.pairs.to_dict("records")
    _, _, in_report = comparison_sections(df, an.summarize(df))[1][0]
    (shown,) = in_report.pairs.to_dict("records")
    ok_a = int((frame_a["status"] == "ok").sum())  # admitted: a throughput of 0 is refused
    ok_b = int((frame_b["status"] == "ok").sum())
    level = max(2, len(a["statuses"]), len(b["statuses"]))
    pair_test = search.compare(0, 1, sample(a), sample(b), search.Settings(threshold=an.MIN_EFFECT, levels=(level,)),
                               last_level=True)

    # The report's comparison view is compare's comparison.
    assert (shown["verdict"], shown["decision"]) == (pair["verdict"], pair["decision"])
    assert same_p(shown["p_value"], pair["p_value"])

    # Comparable or not, in the same words.
    apart = pair["verdict"].startswith("not comparable")
    assert apart == check.reason.startswith("not comparable"), (pair["verdict"], check.reason)
    if apart:
        assert check.reason == pair["verdict"] and check.verdict is Verdict.UNDECIDED
        assert pair["decision"] == "undecided"
        if a["how"] != b["how"] and ok_a and ok_b:
            assert pair_test.why.startswith("not comparable: the throughput is obtained differently")
        return

    # Nothing admitted on either side: nothing was measured, so compare decides as the gate does (the same failure
    # on both sides, or one failure against another: undecided; unsupported on both: pass).
    if not ok_a and not ok_b:
        assert pair["decision"] == check.verdict.value, (pair["verdict"], check.reason)
        assert not pair["significant"]

    # A change of outcome: the same words and the same verdict for "did B newly fail?".
    outcome_words = ("regression:", "fixed:", "oom on", "failed on", "more failures on")
    if pair["verdict"].startswith("regression:"):
        assert check.verdict is Verdict.FAIL and check.reason == pair["verdict"]
        assert pair_test.verdict is Verdict.FAIL
    if check.reason.startswith("regression:"):
        assert pair["verdict"] == check.reason
    if pair["verdict"].startswith(outcome_words) and pair["decision"] == "undecided":
        on_b = pair["verdict"].startswith(("oom on B", "failed on B", "more failures on B"))
        assert check.verdict is Verdict.UNDECIDED or not on_b, (pair["verdict"], check.reason)
        assert not on_b or check.reason == pair["verdict"]
        assert pair_test.verdict is not Verdict.FAIL or pair_test.kind == "metric"

    # A mean of zero or below on a side: no ratio, the same words in every command that reached the metric.
    if check.reason.startswith("not tested: the throughput averages"):
        assert pair["verdict"] == check.reason and pair["decision"] == "undecided"
        if pair_test.kind == "metric" and pair_test.mean_a is not None:
            assert pair_test.why == check.reason and pair_test.verdict is Verdict.UNDECIDED

    # One change per pair: compare's B/A and its interval are the gate's; a pass is never said over an interval that
    # reaches beyond the threshold, in either command (runner/analysis/change.py).
    if check.delta is not None and check.delta.has_interval:
        assert same_p(pair["ratio"], check.delta.ratio) and same_p(pair["ratio_low"], check.delta.low)
        assert same_p(pair["ratio_high"], check.delta.high)
    if check.verdict is Verdict.PASS and check.delta is not None and check.delta.sized:
        assert check.delta.exact or check.delta.toward(rule.sense)[2] <= rule.threshold
    if pair["decision"] == "pass" and pair["ratio"] == pair["ratio"]:
        assert 1 / (1 + an.MIN_EFFECT) <= pair["ratio_low"] <= pair["ratio_high"] <= 1 + an.MIN_EFFECT, pair
    # The same p-value wherever the metric was tested (compare from summary statistics, the gate and bisect from
    # the samples: one formula).
    if not math.isnan(check.p_value) and ok_a >= 2 and ok_b >= 2:
        assert same_p(pair["p_value"], check.p_value), (pair["p_value"], check.p_value)
        if pair_test.p_value is not None:
            assert same_p(pair_test.p_value, check.p_value)
        # One pair: the adjusted p is the p. A slowdown compare calls significant trips `slower` at its minimum
        # effect and the reverse, unless a change of outcome speaks first.
        if not pair["verdict"].startswith(outcome_words) and not check.reason.count(";"):
            slower = pair["decision"] == "fail" and pair["verdict"].startswith("slower")
            assert slower == (check.verdict is Verdict.FAIL), (pair["verdict"], check.reason)
            if pair_test.kind == "metric" and pair_test.p_value is not None and pair_test.p_value < 0.05:
                assert (pair_test.verdict is Verdict.FAIL) == (pair["decision"] == "fail")


def test_compare_and_the_gate_adjust_the_same_family_of_p_values() -> None:
    """A pair decided by its outcomes (B newly fails in most repeats) still has a p-value from its ok repeats; compare
    and the gate both count it in the Benjamini-Hochberg family, so a second pair's adjusted p is the same."""
    def cell(env: str, bs: int, statuses: list[str], values: list[float], start: int) -> list[dict[str, Any]]:
        s = {"statuses": statuses, "values": values, "how": HOWS[0], "iterations": 20}
        return [dict(r, cell_key=f"{env}{bs}", params={**PARAMS, "batch_size": bs}) for r in rows(env, s, start)]
    df = an.frame(an.StoredRepeat.many(cell("A", 32, ["ok"] * 10, [100.0, 100.4, 99.7, 100.2, 99.9] * 2, 0)
                  + cell("B", 32, ["ok"] * 2 + ["oom"] * 8, [97.0, 97.4] + [0.0] * 8, 100)
                  + cell("A", 64, ["ok"] * 3, [100.0, 101.0, 99.0], 200)
                  + cell("B", 64, ["ok"] * 3, [97.0, 98.5, 96.0], 300)))
    comparison = an.compare(an.select_side(df, "A"), an.select_side(df, "B"))
    checks = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"],
                           [gate.Rule("slower", an.MIN_EFFECT)])
    by_batch = {int(r["batch_size"]): r for r in comparison.pairs.to_dict("records")}
    gated = {int(c.params["batch_size"]): c for c in checks}
    assert gated[32].verdict is Verdict.FAIL and gated[32].reason.startswith("regression: B 2 ok, 8 oom")
    assert by_batch[32]["verdict"] == gated[32].reason
    for bs in (32, 64):
        assert same_p(by_batch[bs]["p_adjusted"], gated[bs].p_adjusted), bs


@pytest.mark.parametrize(("status", "decision"), [("oom", "undecided"), ("failed", "undecided"),
                                                   ("unsupported", "pass")])
def test_nothing_measured_on_either_side_is_decided_as_the_gate_decides_it(status: str, decision: str) -> None:
    """Both sides out of memory: `compare --format json` said pass while `compare --fail-on` said undecided.
    Nothing was measured, so nothing passed: the JSON, the report's view and the gate say the same."""
    import json

    from runner.report.render import compare_json
    s = {"statuses": [status] * 3, "values": [0.0] * 3, "how": HOWS[0], "iterations": 20}
    df = an.frame(an.StoredRepeat.many(rows("A", s, 0) + rows("B", s, 100)))
    comparison = an.compare(an.select_side(df, "A"), an.select_side(df, "B"))
    (pair,) = json.loads(compare_json(comparison))["pairs"]
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.02)])
    assert pair["decision"] == decision == check.verdict.value, (pair, check.reason)
    if status != "unsupported":
        assert pair["verdict"] == check.reason == f"no ok repeat on either side ({status} on both sides)"
    _, _, in_report = comparison_sections(df, an.summarize(df))[1][0]
    assert [r["decision"] for r in in_report.pairs.to_dict("records")] == [decision]


FAILURES = ("oom", "failed", "timeout", "diverged", "unsupported", "not_started")


@pytest.mark.parametrize("a_status", FAILURES)
@pytest.mark.parametrize("b_status", FAILURES)
def test_one_failure_against_another_is_undecided_in_compare_as_in_the_gate(a_status: str, b_status: str) -> None:
    """A all `failed`, B all `oom`: `compare --format json` said `fail` and counted the pair significant while the
    gate said undecided. Neither side measured anything: only unsupported on both passes."""
    import json

    from runner.report.render import compare_json
    rows_ab = (rows("A", {"statuses": [a_status] * 3, "values": [0.0] * 3, "how": HOWS[0], "iterations": 20}, 0)
               + rows("B", {"statuses": [b_status] * 3, "values": [0.0] * 3, "how": HOWS[0], "iterations": 20}, 100))
    df = an.frame(an.StoredRepeat.many(rows_ab))
    comparison = an.compare(an.select_side(df, "A"), an.select_side(df, "B"))
    (pair,) = json.loads(compare_json(comparison))["pairs"]
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.02)])
    expected = "pass" if a_status == b_status == "unsupported" else "undecided"
    assert pair["decision"] == check.verdict.value == expected, (pair["verdict"], check.reason)
    assert not pair["significant"]
    if a_status != b_status:
        assert pair["verdict"] == f"no ok repeat on either side ({a_status} -> {b_status})"
