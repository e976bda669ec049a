"""A figure's printed resolution is part of its uncertainty (runner/analysis/resolution.py): a program that prints
its throughput to two digits gives repeats without spread, and no command may call that certainty."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runner import analysis as an
from runner.analysis import bisect_search as search
from runner.analysis import gate, resolution, significance
from runner.analysis.history import history
from runner.analysis.verdict import Verdict
from runner.record.repeat import Repeat
from runner.record.stored import StoredRepeat
from tests.analysis.helpers import long_frame, rows_for


def printed(rows: list[dict[str, Any]], resolution_: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """The rows as a workload's parser stores them: figures read from the program's printed output."""
    out = []
    for r in rows:
        metrics = dict(r["metrics"], images=r["metrics"]["throughput"])
        if resolution_:
            metrics["resolution"] = resolution_
        out.append(dict(r, metrics=metrics, raw={"workload": {"parser": "pattern"}, "params": {}}))
    return out


def test_the_quantum_of_printed_values_is_the_finest_power_of_ten_they_all_share() -> None:
    assert resolution.quantum([100.0, 110.0, 100.0]) == 10.0
    assert resolution.quantum([104.7, 105.3]) == pytest.approx(0.1)
    assert resolution.quantum([0.1 * 3 * 10, 1.2]) == pytest.approx(0.1)  # 3.0000000000000004: still to the tenth
    assert resolution.quantum([4663.2134567891]) < 1e-6 * 4663  # a computed float: negligible
    assert resolution.quantum([100.0], recorded=[0.5]) == 10.0 and resolution.quantum([104.7], [0.5]) == 0.5
    assert resolution.quantum([10.0, 10.0]) == 1.0  # two digits printed at least: "10", not "1e1"


def decide(va: list[float], vb: list[float], **kw: Any) -> tuple[gate.GateCheck, dict[str, Any]]:
    df = long_frame(printed(rows_for("k", va, run_id="ra", environment="A"), **kw),
                    printed(rows_for("k", vb, run_id="rb", environment="B", start=2000.0), **kw))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.01)])
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B")).pairs.to_dict("records")
    return check, pair


def test_figures_rounded_to_two_digits_are_never_a_certain_change() -> None:
    """True 104.7 and 105.3 img/s printed as 1.0e2 and 1.1e2: three repeats each without spread. The gate used to
    say 'slower by 10%, no spread on either side'; rounding alone may explain that, so nothing decides it."""
    check, pair = decide([110.0, 110.0, 110.0], [100.0, 100.0, 100.0])
    assert check.verdict is Verdict.UNDECIDED and "printed too coarsely" in check.reason, check.reason
    assert "no spread" not in check.reason
    assert pair["decision"] == "undecided" and "printed too coarsely" in pair["verdict"], pair["verdict"]


def test_equal_rounded_figures_are_not_a_certain_sameness_either() -> None:
    check, pair = decide([100.0, 100.0, 100.0], [100.0, 100.0, 100.0])
    assert check.verdict is Verdict.UNDECIDED and pair["decision"] == "undecided"


def test_a_change_larger_than_rounding_can_explain_is_still_found() -> None:
    check, pair = decide([150.0, 150.0, 150.0], [100.0, 100.0, 100.0])
    assert check.verdict is Verdict.FAIL and pair["decision"] == "fail" and pair["verdict"] == "slower"


def test_a_recorded_resolution_counts_even_where_the_digits_look_fine() -> None:
    """A parser that read '0.12 s/step' and derived 2133.33 img/s records the derived figure's resolution."""
    check, _ = decide([2133.33, 2133.33, 2133.33], [2050.0, 2050.0, 2050.0], resolution_={"throughput": 180.0})
    assert check.verdict is Verdict.UNDECIDED, check.reason


def test_the_benchmarks_own_figures_keep_their_certainty() -> None:
    """bench computes its figures (no printed digits): equal repeats on both sides stay exact, as before."""
    df = long_frame(rows_for("k", [110.0] * 3, run_id="ra", environment="A"),
                    rows_for("k", [100.0] * 3, run_id="rb", environment="B", start=2000.0))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.01)])
    assert check.verdict is Verdict.FAIL and "no spread" in check.reason


def test_bisect_and_history_see_the_same_resolution() -> None:
    a = printed(rows_for("k", [110.0] * 3, run_id="n1"))
    b = printed(rows_for("k", [100.0] * 3, run_id="n2", start=2000.0))
    h = history(long_frame(a, b))
    assert not h["step"].any() and "printed too coarsely" in h["undecided"].iloc[1]

    def sample(rows: list[dict[str, Any]]) -> search.Sample:
        reps = [Repeat.of(StoredRepeat.of(r)) for r in rows]
        values = [v for r in reps if (v := r.value("throughput")) is not None]
        q = resolution.of_rows(values, [r.resolution for r in reps], [r.printed for r in reps], "throughput")
        return search.Sample(tuple(r.status for r in reps), tuple(values), quanta=q)

    judged = search.compare(0, 1, sample(a), sample(b), search.Settings(threshold=0.05, levels=(3,)), last_level=True)
    assert judged.verdict is not Verdict.FAIL
    assert judged.ci is not None and judged.ci[0] < -0.05 < 0 < judged.ci[1]


def test_an_interval_widens_by_what_rounding_may_move() -> None:
    low, high = significance.welch_interval(np.array([100.0] * 3), np.array([110.0] * 3), quanta=(10.0, 10.0))
    assert low <= 0 <= high
    assert significance.welch_interval([100.0] * 3, [110.0] * 3) == (10.0, 10.0)
