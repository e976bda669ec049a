"""The regression gate: rules, the threshold-and-significance rule, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runner.analysis import gate, significance
from runner.analysis.verdict import Verdict, exit_status
from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit
from tests.analysis.helpers import long_frame, rows_for

RNG = np.random.default_rng(1)
BASE = 100 + RNG.normal(0, 0.5, 8)   # 0.5% noise


def sides(a: list[float], b: list[float], b_status: str = "ok", **kw: object) -> tuple[object, object]:
    return (long_frame(rows_for("k", a, environment="A", **kw)),
            long_frame(rows_for("k", b, environment="B", status=b_status, run_id="r2", start=2000.0, **kw)))


def test_rules_parse_repeatable_and_comma_separated() -> None:
    rules = gate.parse_rules(["slower:3%,memory:10%", "faster:0.05"])
    assert [(r.kind, r.threshold, r.metric) for r in rules] == [
        ("slower", 0.03, "throughput"), ("memory", 0.10, "peak_mem"), ("faster", 0.05, "throughput")]
    assert rules[0].text == "slower:3%"


@pytest.mark.parametrize("bad", ["slow:3%", "slower", "slower:x%", "slower:3", "slower:150%"])
def test_a_wrong_rule_is_one_line(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"--fail-on"):
        gate.parse_rules([bad])


def test_a_significant_slowdown_beyond_the_threshold_trips() -> None:
    a, b = sides(list(BASE), list(BASE / 1.10))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.tripped and c.change == pytest.approx(0.10) and c.p_value < 0.001
    assert "slower by 10.0% > 3.0%" in c.reason


def test_a_significant_change_below_the_threshold_does_not_trip() -> None:
    a, b = sides(list(BASE), list(BASE / 1.02))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    # Significant, but its whole interval lies inside the threshold: the data rule a 3% slowdown out.
    assert c.verdict is Verdict.PASS and c.p_value < 0.05 and "slower (95%): within 3.0%" in c.reason
    assert 0 < c.delta.toward(-1)[2] < 0.03  # the interval's feared end, inside the threshold


def test_a_large_change_that_is_not_significant_does_not_trip() -> None:
    a, b = sides([100.0, 60.0, 140.0], [90.0, 50.0, 130.0])
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    # Not shown to be beyond the threshold, and not shown to be inside it: undecided, never "passed".
    assert c.change > 0.03 and c.verdict is Verdict.UNDECIDED and "not significant" in c.reason
    assert c.needed is not None and c.needed > 3 and f"about {c.needed} repeats a side would decide" in c.reason


def test_faster_and_memory_rules_look_the_other_way() -> None:
    a, b = sides(list(BASE), list(BASE * 1.2))
    slower, faster = gate.evaluate(a, b, gate.parse_rules(["slower:3%", "faster:10%"]))
    assert not slower.tripped and faster.tripped
    a, b = (long_frame(rows_for("k", [1.0] * 4, environment="A", peak=100.0)),
            long_frame(rows_for("k", [1.0] * 4, environment="B", peak=100.0, run_id="r2", start=5.0)))
    # Peak memory with no spread at all is certain: the same on both sides passes.
    (mem,) = gate.evaluate(a, b, gate.parse_rules(["memory:5%"]))
    assert mem.verdict is Verdict.PASS and mem.reason == "+0.0% is within 5.0% (no spread on either side)"


def test_memory_growth_trips() -> None:
    peaks_a, peaks_b = [100.0, 101.0, 99.0, 100.5], [120.0, 121.0, 119.0, 120.5]
    a = long_frame([r for i, p in enumerate(peaks_a) for r in rows_for("k", [1.0], environment="A", peak=p,
                                                                        start=10.0 * i)])
    b = long_frame([r for i, p in enumerate(peaks_b) for r in rows_for("k", [1.0], environment="B", peak=p,
                                                                        start=100.0 + 10 * i, run_id="r2")])
    (mem,) = gate.evaluate(a, b, gate.parse_rules(["memory:10%"]))
    assert mem.tripped and mem.change == pytest.approx(0.2, abs=0.01)


def test_a_cell_that_newly_fails_trips_slower() -> None:
    a, b = sides([100.0, 101.0], [math.nan, math.nan], b_status="oom")
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.tripped and c.reason == "regression: B 2 oom (A 2 ok)"


def test_cells_pair_on_params_only() -> None:
    a = long_frame(rows_for("k1", list(BASE), environment="A", batch_size=32))
    b = long_frame(rows_for("k2", list(BASE / 1.1), environment="B", batch_size=64, run_id="r2", start=9.0))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.params["batch_size"] == 32 and c.verdict is Verdict.UNDECIDED
    assert gate.only_in_b(a, b)[0]["batch_size"] == 64


def test_json_is_stable_and_lists_every_check() -> None:
    a, b = sides(list(BASE), list(BASE / 1.10))
    rules = gate.parse_rules(["slower:3%", "faster:3%"])
    checks = gate.evaluate(a, b, rules)
    text = gate.to_json("A", "B", rules, checks)
    doc = json.loads(text)
    assert doc["schema"] == 3 and doc["tripped"] is True and doc["n_tripped"] == 1
    slower = doc["checks"][0]
    # The pair's one ratio B/A and its interval, and the change in the rule's direction with its interval.
    assert slower["ratio_low"] < slower["ratio"] < slower["ratio_high"] < 1
    assert 0.03 < slower["change_low"] < slower["change"] < slower["change_high"]
    assert slower["ratio"] == pytest.approx(1 / 1.10, rel=1e-4) and slower["change"] == pytest.approx(0.10, rel=1e-3)
    assert slower["confidence"] == 0.95 and slower["repeats_needed"] is None
    assert doc["verdict"] == "fail" and doc["counts"] == {"pass": 1, "fail": 1, "undecided": 0}
    assert [c["verdict"] for c in doc["checks"]] == ["fail", "pass"]
    assert doc["correction"] == "benjamini-hochberg"
    assert doc["test"] == significance.TEST_NAME
    assert [c["rule"] for c in doc["checks"]] == ["slower:3%", "faster:3%"]
    assert text == gate.to_json("A", "B", rules, gate.evaluate(a, b, rules))
    assert gate.rows(checks)[0]["rule"] == "slower:3%"
    assert gate.summary_line(rules, checks).startswith("Gate tripped")


def test_a_metric_not_measured_is_undecided_not_passed() -> None:
    a, b = sides(list(BASE), list(BASE))  # no peak memory stored (a CPU)
    (c,) = gate.evaluate(a, b, gate.parse_rules(["memory:5%"]))
    assert c.verdict is Verdict.UNDECIDED and c.reason == "peak_mem not measured on either side"


# Verdicts that claim no more than was tested (issue 18) -----------------------------------------

def test_one_repeat_a_side_is_undecided_even_ten_times_slower() -> None:
    """With `repeats: 1` Welch has no p-value: the gate once said "Gate passed ... 1 pair checked"."""
    a, b = sides([100.0], [10.0])
    rules = gate.parse_rules(["slower:3%"])
    (c,) = gate.evaluate(a, b, rules)
    assert c.verdict is Verdict.UNDECIDED and not c.tripped
    assert c.reason == "not tested: 1 ok repeat on A and 1 ok repeat on B (a test needs 2+ per side)"
    line = gate.summary_line(rules, [c])
    assert line.startswith("Gate undecided (slower:3%): 1 undecided of 1 check over 1 pair")
    assert "passed" not in line
    assert exit_status([c.verdict], "error") is Exit.UNDECIDED
    assert exit_status([c.verdict], "fail") is Exit.FAILED
    assert exit_status([c.verdict], "pass") is Exit.OK
    passed = gate.summary_line(rules, [c], "pass")
    assert passed.startswith("Gate passed (slower:3%), with 1 undecided counted as passed (--undecided pass):")
    assert "1 undecided" in passed
    assert [r["verdict"] for r in gate.rows([c])] == ["undecided"]


def test_one_side_with_one_repeat_is_undecided_with_the_reason() -> None:
    a, b = sides(list(BASE), [50.0])
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.verdict is Verdict.UNDECIDED
    assert c.reason == "not tested: 1 ok repeat on B (a test needs 2+ per side)"


def test_memory_without_spread_is_judged_by_its_size() -> None:
    """GPU peak memory: 4096 MiB on every repeat of A, 8192 on every repeat of B. Welch has no p-value, yet
    the difference is certain: the memory gate must trip (it never could)."""
    a = long_frame(rows_for("k", list(BASE[:4]), environment="A", peak=4096.0))
    b = long_frame(rows_for("k", list(BASE[:4]), environment="B", peak=8192.0, run_id="r2", start=2000.0))
    (mem,) = gate.evaluate(a, b, gate.parse_rules(["memory:5%"]))
    assert mem.verdict is Verdict.FAIL and mem.change == pytest.approx(1.0)
    assert mem.reason == "memory by 100.0% > 5.0%, no spread on either side"
    small = long_frame(rows_for("k", list(BASE[:4]), environment="B", peak=4100.0, run_id="r2", start=2000.0))
    (ok,) = gate.evaluate(a, small, gate.parse_rules(["memory:5%"]))
    assert ok.verdict is Verdict.PASS and "within 5.0%" in ok.reason


def test_the_summary_counts_passed_failed_and_undecided() -> None:
    a = long_frame(rows_for("k1", list(BASE), environment="A", batch_size=32),
                   rows_for("k2", [100.0], environment="A", batch_size=64, start=3000.0),
                   rows_for("k3", list(BASE), environment="A", batch_size=128, start=4000.0))
    b = long_frame(rows_for("k4", list(BASE), environment="B", batch_size=32, run_id="r2", start=5000.0),
                   rows_for("k5", [90.0], environment="B", batch_size=64, run_id="r2", start=6000.0),
                   rows_for("k6", list(BASE / 1.5), environment="B", batch_size=128, run_id="r2", start=7000.0))
    rules = gate.parse_rules(["slower:3%"])
    checks = gate.evaluate(a, b, rules)
    assert [c.verdict for c in checks] == [Verdict.PASS, Verdict.UNDECIDED, Verdict.FAIL]
    assert gate.summary_line(rules, checks).startswith(
        "Gate tripped (slower:3%): 1 passed, 1 failed, 1 undecided of 3 checks over 3 pairs")
    assert [r["verdict"] for r in gate.rows(checks)] == ["undecided", "fail"]


def test_no_pair_to_check_is_undecided() -> None:
    a = long_frame(rows_for("k1", list(BASE), environment="A", batch_size=32))
    b = long_frame(rows_for("k2", list(BASE), environment="B", batch_size=64, run_id="r2", start=9.0))
    rules = gate.parse_rules(["slower:3%"])
    checks = gate.evaluate(a, b, rules)
    assert [c.verdict for c in checks] == [Verdict.UNDECIDED] and gate.verdict_of(checks) is Verdict.UNDECIDED
    assert gate.verdict_of([]) is Verdict.UNDECIDED
    assert gate.summary_line(rules, []).startswith("Gate undecided")


def test_many_pairs_are_adjusted_for_the_false_discovery_rate() -> None:
    """One pair at p = 0.03 trips; the same p in each of 20 pairs of one comparison does not (BH)."""
    xa, xb = [100.0, 101.0, 102.0, 103.0], [103.0, 104.0, 105.0, 106.5]
    p = significance.welch(xa, xb)
    assert 0.01 < p < 0.05
    rules = gate.parse_rules(["faster:1%"])
    one_a, one_b = sides(xa, xb)
    (single,) = gate.evaluate(one_a, one_b, rules)
    assert single.tripped and single.p_adjusted == pytest.approx(p)
    many_a = long_frame(*(rows_for(f"a{i}", xa, environment="A", batch_size=i + 1, start=100.0 * i)
                          for i in range(20)))
    quiet = [100.0, 101.0, 102.0, 103.0]
    many_b = long_frame(rows_for("b0", xb, environment="B", batch_size=1, run_id="r2", start=5000.0),
                        *(rows_for(f"b{i}", quiet, environment="B", batch_size=i + 1, run_id="r2",
                                   start=5000.0 + 100 * i) for i in range(1, 20)))
    checks = gate.evaluate(many_a, many_b, rules)
    assert len(checks) == 20 and not gate.tripped(checks)
    assert checks[0].p_value == pytest.approx(p) and checks[0].p_adjusted == pytest.approx(min(1.0, p * 20))
    assert "significant alone (p=0.0196) but not once adjusted over the 20 tests" in checks[0].reason


def test_a_name_with_two_definitions_is_judged_by_its_newest_not_a_mix() -> None:
    """B's environment was redefined (another key, same name and params): its older repeats (at A's speed)
    must not be averaged with the newer ones (10% slower)."""
    a = long_frame(rows_for("ka", list(BASE), environment="A"))
    b = long_frame(rows_for("kb-old", list(BASE), environment="B", run_id="r2", start=2000.0),
                   rows_for("kb-new", list(BASE / 1.10), environment="B", run_id="r3", start=3000.0))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.tripped and c.change == pytest.approx(0.10) and c.b_n == len(BASE)
    (pooled,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]), pool=True)
    assert pooled.b_n == 2 * len(BASE) and pooled.change == pytest.approx(0.05, abs=0.003)


def test_pairs_whose_run_settings_differ_are_not_comparable() -> None:
    def with_settings(rows: list[dict], iterations: int) -> list[dict]:
        return [{**r, "raw": {"params": {"iterations": iterations, "warmup": 5, "seed": 0}}} for r in rows]
    a = long_frame(with_settings(rows_for("ka", list(BASE), environment="A"), 20))
    b = long_frame(with_settings(rows_for("kb", list(BASE / 2), environment="B", run_id="r2", start=2000.0), 200))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.verdict is Verdict.UNDECIDED
    assert c.reason == ("not comparable: run settings differ (iterations=20 warmup=5 seed=0 vs "
                        "iterations=200 warmup=5 seed=0)")


def test_cells_b_never_measured_are_undecided_checks_not_dropped() -> None:
    """A has three cells, B ran one: the other two are undecided checks in the text and the JSON (the gate used to
    say `Gate passed (slower:3%): 1 passed of 1 check over 1 pair`)."""
    a = long_frame(*(rows_for(f"a{bs}", list(BASE), environment="A", batch_size=bs, start=1000.0 * i)
                     for i, bs in enumerate((32, 64, 128), 1)))
    b = long_frame(rows_for("b32", list(BASE), environment="B", batch_size=32, run_id="r2", start=9000.0))
    rules = gate.parse_rules(["slower:3%"])
    checks = gate.evaluate(a, b, rules)
    assert [c.verdict for c in checks] == [Verdict.PASS, Verdict.UNDECIDED, Verdict.UNDECIDED]
    assert checks[1].reason == "not measured on B (no repeat of this cell)"
    assert gate.summary_line(rules, checks).startswith(  # a cell B never measured is a check, not a pair
        "Gate undecided (slower:3%): 1 passed, 2 undecided of 3 checks over 1 pair and 2 cells of A not measured on B")
    assert exit_status([c.verdict for c in checks]) is Exit.UNDECIDED
    assert exit_status([c.verdict for c in checks], "pass") is Exit.OK  # the user's choice, said in the line
    assert "counted as passed" in gate.summary_line(rules, checks, "pass")
    doc = json.loads(gate.to_json("A", "B", rules, checks))
    assert doc["counts"] == {"pass": 1, "fail": 0, "undecided": 2}
    assert [c["batch_size"] for c in doc["checks"] if c["verdict"] == "undecided"] == [64, 128]


def test_a_new_failure_on_b_is_not_passed_over() -> None:
    """A 3 ok; B 2 ok and 1 oom: too few repeats to tell a flaky OOM from chance, so undecided, and said; with
    many repeats a frequent new OOM fails the check (the gate used to pass and never mention it)."""
    a = long_frame(rows_for("ka", [100.0, 100.5, 99.8], environment="A"))
    oom = rows_for("kb", [math.nan], environment="B", run_id="r2", start=3000.0, status="oom")
    b = long_frame(rows_for("kb", [100.2, 99.9], environment="B", run_id="r2", start=2000.0),
                   [dict(r, repeat=2) for r in oom])
    rules = gate.parse_rules(["slower:3%"])
    (c,) = gate.evaluate(a, b, rules)
    assert c.verdict is Verdict.UNDECIDED and c.reason == "oom on B only (3 ok vs 2 ok, 1 oom), fisher p=1: more repeats needed"
    assert json.loads(gate.to_json("A", "B", rules, [c]))["checks"][0]["reason"] == c.reason
    many_a = long_frame(rows_for("ka", list(BASE) + list(BASE), environment="A"))
    oom = [dict(r, repeat=r["repeat"] + 4, id=r["id"] + 100) for r in
           rows_for("kb", [math.nan] * 12, environment="B", run_id="r2", start=2000.0, status="oom")]
    many_b = long_frame(rows_for("kb", list(BASE[:4]), environment="B", run_id="r2", start=2000.0), oom)
    (c,) = gate.evaluate(many_a, many_b, rules)
    assert c.tripped and c.reason.startswith("regression: B 4 ok, 12 oom (A 16 ok), fisher p=")
    slower = long_frame(rows_for("kb", list(BASE[:4] / 1.2), environment="B", run_id="r2", start=2000.0), oom[:1])
    (c,) = gate.evaluate(many_a, slower, rules)  # the speed decides: slower anyway, the new OOM said
    assert c.tripped and c.reason.startswith("slower by 20.") and "oom on B only" in c.reason


def test_the_gate_says_throttling_as_compare_does() -> None:
    a, b = sides(list(BASE), list(BASE / 1.10))
    b = b.assign(throttled=True)
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.tripped and c.note == "coincides with throttling: B throttled in 8 of 8"
    assert json.loads(gate.to_json("A", "B", gate.parse_rules(["slower:3%"]), [c]))["checks"][0]["note"] == c.note
    assert "coincides with throttling" in gate.rows([c])[0]["why"]


def test_two_definitions_of_a_metric_are_not_compared_as_one() -> None:
    """mllog's throughput from tracked_stats on A, from train_samples over the whole run on B: never paired."""
    def defined(rows: list[dict], how: str) -> list[dict]:
        for r in rows:
            r["metrics"]["definitions"] = {"throughput": {"how": how, "unit": "samples/s"}}
        return rows
    a = long_frame(defined(rows_for("k", [1000.0] * 3, environment="A"), "mllog: mean of tracked_stats"))
    b = long_frame(defined(rows_for("k", [500.0] * 3, environment="B", run_id="r2", start=2000.0),
                           "mllog: train_samples / (run_stop - run_start)"))
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.verdict is Verdict.UNDECIDED and c.reason.startswith("not comparable: the throughput is obtained "
                                                                  "differently (mllog: mean of tracked_stats")


def test_a_cell_a_never_measured_is_not_counted_as_a_pair() -> None:
    """A cell whose repeats in A were all cancelled is an undecided check 'not measured on A'; the summary counted
    it as a pair ('over 2 pairs' with one cell measured on both sides), whatever B held."""
    a = long_frame(rows_for("a32", list(BASE), environment="A", start=1000.0),
                   rows_for("a64", [float("nan")] * 2, environment="A", batch_size=64, start=2000.0, status="cancelled"))
    rules = gate.parse_rules(["slower:3%", "memory:10%"])
    for b64 in ([100.0, 101.0, 99.0], []):
        b = long_frame(rows_for("b32", list(BASE), environment="B", run_id="r2", start=9000.0),
                       rows_for("b64", b64, environment="B", batch_size=64, run_id="r2", start=9500.0))
        checks = gate.evaluate(a, b, rules)
        assert [c.reason for c in checks[:2]][1] == "not measured on A (no repeat of this cell)"
        line = gate.summary_line(rules, checks)
        assert "over 1 pair and 1 cell not measured on A." in line, line
