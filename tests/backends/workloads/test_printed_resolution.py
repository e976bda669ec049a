"""A workload's figures carry the resolution they were printed at (runner/bench/parsers.py records it per metric in
the store's unit, through means, scales and derived rates), and the decision core counts it as uncertainty: a
program that prints its step time to the hundredth gives repeats whose identical means say nothing finer."""

from __future__ import annotations

from typing import Any

import pytest

from runner.analysis import gate
from runner.analysis.verdict import Verdict
from runner.bench import parsers
from runner.bench.readings import quantum_of
from tests.analysis.helpers import long_frame, rows_for


@pytest.mark.parametrize(("text", "q"), [("12.34", 0.01), ("12.30", 0.01), ("4663", 1.0), ("1.2e3", 100.0),
                                          ("1,234.5", 0.1), ("-0.5", 0.1), ("nan", 0.0), ("abc", 0.0)])
def test_the_resolution_of_a_printed_number_is_its_last_digit(text: str, q: float) -> None:
    assert quantum_of(text) == pytest.approx(q)


def outcome(kind: str, lines: list[str], **config: Any) -> dict[str, Any]:
    p = parsers.make({"kind": kind, **config})
    for line in lines:
        p.feed(line)
    return p.outcome()


def test_a_rate_derived_from_a_printed_step_time_carries_the_times_resolution() -> None:
    """256 images over a step printed as 0.12 s: the rate is 2133 img/s, but 0.115-0.125 s is 2048-2226 img/s."""
    got = outcome("pattern", ["step time 0.12 s"] * 3, items_per_step=256,
                  figures=[{"name": "t", "regex": r"step time (\S+) s", "metric": "iter_time", "reduce": "mean"}])
    assert got["metrics"]["throughput"] == pytest.approx(2133.33, rel=1e-4)
    assert got["resolution"]["iter_time"] == pytest.approx(0.01)
    assert got["resolution"]["throughput"] == pytest.approx(256 * 0.01 / 0.12**2)


def test_a_mean_of_printed_figures_keeps_their_coarsest_resolution_and_a_scale_scales_it() -> None:
    got = outcome("pattern", ["rate 1.2e3", "rate 1250", "rate 1300"], figures=[
        {"name": "r", "regex": r"rate (\S+)", "metric": "throughput", "reduce": "mean", "scale": 2.0}])
    assert got["resolution"]["throughput"] == pytest.approx(200.0)


def test_json_logs_keep_the_digits_their_numbers_were_printed_with() -> None:
    lines = [f':::MLLOG {{"key": "tracked_stats", "value": {{"throughput": {v}}}, "time_ms": {i}}}'
             for i, v in enumerate(["100.5", "101.25", "102.0"])]
    assert outcome("mllog", lines)["resolution"] == {"throughput": pytest.approx(0.1)}
    dll = [f'DLLL {{"type": "LOG", "step": [1], "data": {{"throughput_train": {v}}}}}' for v in ("2000", "2100", "2200")]
    assert outcome("dllogger", dll)["resolution"] == {"throughput": 1.0}


def test_means_that_agree_to_the_last_printed_digit_are_not_a_certain_change() -> None:
    """Three nights of a program printing its step time to the hundredth: the means of the rates are identical on
    each side (no spread), 2133 against 2071 img/s, a 3% change the gate would call certain. It may be none."""
    def side(env: str, value: float, start: float) -> list[dict[str, Any]]:
        rows = rows_for("k", [value] * 3, run_id=env, environment=env, start=start)
        for r in rows:
            r["metrics"].update(images=value, resolution={"throughput": 256 * 0.01 / (256 / value) ** 2})
            r["raw"] = {"workload": {"parser": "pattern"}, "params": {}}
        return rows
    df = long_frame(side("A", 2133.33, 0.0), side("B", 2071.0, 1000.0))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.01)])
    assert check.verdict is Verdict.UNDECIDED and "printed too coarsely" in check.reason, check.reason
