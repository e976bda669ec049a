"""The regression gate: rules, the threshold-and-significance rule, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from runner.decide import gate, significance
from runner.errors import ConfigError
from tests.decide.helpers import long_frame, rows_for

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
    assert not c.tripped and c.p_value < 0.05 and "within 3.0% (significant)" in c.reason


def test_a_large_change_that_is_not_significant_does_not_trip() -> None:
    a, b = sides([100.0, 60.0, 140.0], [90.0, 50.0, 130.0])
    (c,) = gate.evaluate(a, b, gate.parse_rules(["slower:3%"]))
    assert c.change > 0.03 and not c.tripped and "not significant" in c.reason


def test_faster_and_memory_rules_look_the_other_way() -> None:
    a, b = sides(list(BASE), list(BASE * 1.2))
    slower, faster = gate.evaluate(a, b, gate.parse_rules(["slower:3%", "faster:10%"]))
    assert not slower.tripped and faster.tripped
    a, b = (long_frame(rows_for("k", [1.0] * 4, environment="A", peak=100.0)),
            long_frame(rows_for("k", [1.0] * 4, environment="B", peak=100.0, run_id="r2", start=5.0)))
    # Peak memory with no spread at all cannot be tested: reported, not tripped.
    (mem,) = gate.evaluate(a, b, gate.parse_rules(["memory:5%"]))
    assert not mem.tripped and mem.reason.startswith("not tested")


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
    assert c.tripped and c.reason == "B has no ok repeat (A has)"


def test_cells_pair_on_params_only() -> None:
    a = long_frame(rows_for("k1", list(BASE), environment="A", batch_size=32))
    b = long_frame(rows_for("k2", list(BASE / 1.1), environment="B", batch_size=64, run_id="r2", start=9.0))
    assert gate.evaluate(a, b, gate.parse_rules(["slower:3%"])) == []


def test_json_is_stable_and_lists_every_check() -> None:
    a, b = sides(list(BASE), list(BASE / 1.10))
    rules = gate.parse_rules(["slower:3%", "faster:3%"])
    checks = gate.evaluate(a, b, rules)
    text = gate.to_json("A", "B", rules, checks)
    doc = json.loads(text)
    assert doc["schema"] == 1 and doc["tripped"] is True and doc["n_tripped"] == 1
    assert doc["test"] == significance.TEST_NAME
    assert [c["rule"] for c in doc["checks"]] == ["slower:3%", "faster:3%"]
    assert text == gate.to_json("A", "B", rules, gate.evaluate(a, b, rules))
    assert gate.rows(checks)[0]["rule"] == "slower:3%"
    assert gate.summary_line(rules, checks).startswith("Gate tripped")


def test_a_metric_not_measured_is_said_and_does_not_trip() -> None:
    a, b = sides(list(BASE), list(BASE))  # no peak memory stored (a CPU)
    (c,) = gate.evaluate(a, b, gate.parse_rules(["memory:5%"]))
    assert not c.tripped and c.reason == "peak_mem not measured on either side"
