"""Edge cases every decision must answer the same way and never with a pass it cannot back: a throughput of zero,
below zero or infinite is no figure a machine produces, so admission refuses the repeat and compare, the gate and
bisect all call the pair undecided, in the same words, instead of "+nan% is within 3%" or "not significant (change
< 2%)"; a mean of zero of a metric where zero is a figure (memory) has no ratio, said the same way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runner import analysis as an
from runner.analysis import bisect_search as search
from runner.analysis import gate
from runner.analysis.history import history
from runner.analysis.verdict import Verdict
from tests.analysis.helpers import long_frame, rows_for
from tests.analysis.test_agreement import same_p


def decide(va: list[float], vb: list[float], kind: str = "slower") -> tuple[gate.GateCheck, dict]:
    df = long_frame(rows_for("k", va, run_id="ra", environment="A"),
                    rows_for("k", vb, run_id="rb", environment="B", start=2000.0))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule(kind, 0.03)])
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B")).pairs.to_dict("records")
    return check, pair


@pytest.mark.parametrize("va, vb, side", [
    ([100.0, 101.0, 99.0], [0.0, 0.0, 0.0], "B"),
    ([0.0, 0.0, 0.0], [100.0, 101.0, 99.0], "A"),
    ([100.0, 101.0, 99.0], [-5.0, -6.0, -4.0], "B"),
])
@pytest.mark.parametrize("kind", ["slower", "faster"])
def test_a_figure_no_machine_produces_is_refused_and_undecided_everywhere(va: list[float], vb: list[float], side: str,
                                                                         kind: str) -> None:
    check, pair = decide(va, vb, kind)
    assert check.verdict is Verdict.UNDECIDED, check.reason
    assert pair["decision"] == "undecided", pair["verdict"]
    assert check.reason.startswith(f"no admitted repeat on {side} (3 refused"), check.reason
    assert pair["verdict"] == check.reason
    assert not pair["significant"]


def test_a_mean_of_zero_where_zero_is_a_figure_has_no_ratio_in_any_command() -> None:
    """Peak memory may be 0 bytes (admitted); a change of it has no ratio: undecided in the same words."""
    df = long_frame(rows_for("k", [100.0, 101.0, 99.0], run_id="ra", environment="A", peak=0.0),
                    rows_for("k", [100.0, 101.0, 99.0], run_id="rb", environment="B", start=2000.0, peak=10.0))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("memory", 0.03)])
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B"), "peak_mem").pairs.to_dict("records")
    assert check.verdict is Verdict.UNDECIDED and "positive" in check.reason and "on A" in check.reason
    assert pair["verdict"] == check.reason and pair["decision"] == "undecided"


def test_an_infinite_figure_is_no_measurement_for_any_command() -> None:
    """The frame reads an infinite figure as not measured, so compare, the gate and bisect (which reads a repeat's
    value through the frame) all test the same finite values: none keeps it, none drops it alone."""
    check, pair = decide([100.0, 101.0, 99.0], [math.inf, 60.0, 61.0])
    assert check.b_n == pair["b_n"] == 2
    assert check.verdict is Verdict.FAIL and pair["decision"] == "fail"
    assert same_p(check.p_value, pair["p_value"])
    df = long_frame(rows_for("k", [math.inf, -math.inf, 5.0], run_id="ra", environment="A"))
    assert df["throughput"].isna().tolist() == [True, True, False]


@pytest.mark.parametrize("va, vb, side", [([100.0, 101.0, 99.0], [0.0, 0.0, 0.0], "B"),
                                          ([100.0, 101.0, 99.0], [-5.0, -6.0, -4.0], "B")])
def test_bisect_says_what_compare_says_of_a_figure_no_machine_produces(va: list[float], vb: list[float],
                                                                       side: str) -> None:
    """bisect reads each stored row as a Repeat (runner/bisect/store_measure.py), so admission has spoken there too."""
    from runner.record.repeat import Repeat
    from runner.record.stored import StoredRepeat

    check, _ = decide(va, vb)

    def sample(values: list[float]) -> search.Sample:
        repeats = [Repeat.of(StoredRepeat.of(r)) for r in rows_for("k", values)]
        return search.Sample(tuple(r.status for r in repeats),
                             tuple(v for r in repeats if r.ok and (v := r.value("throughput")) is not None))

    s = search.Settings(threshold=0.03, levels=(3,))
    judged = search.compare(0, 1, sample(va), sample(vb), s, last_level=True)
    assert judged.verdict is Verdict.UNDECIDED and judged.why == check.reason, (judged.why, check.reason)


def test_judge_pair_never_passes_a_ratio_that_is_not_positive() -> None:
    for ratio in (0.0, -0.05, math.inf):
        significant, words, decision = an.judge_pair(ratio, 1e-6, 3, 3, an.get_metric("throughput"))
        assert decision is Verdict.UNDECIDED and not significant, (ratio, words)


def _with(rows: list[dict], **metrics: object) -> list[dict]:
    return [dict(r, metrics={**r["metrics"], **metrics}) for r in rows]


def test_history_never_passes_over_a_point_it_cannot_size() -> None:
    """A point after one whose mean is zero has no ratio: history says why, as compare and the gate do, instead of
    an empty 'undecided' beside a significant p-value (a silent "no step"). Peak memory: zero is a figure there."""
    df = long_frame(rows_for("k", [100.0, 101.0, 99.0], run_id="n1", start=1000.0, peak=0.0),
                    rows_for("k", [100.0, 101.0, 99.0], run_id="n2", start=2000.0, peak=10.0))
    h = history(df, metric="peak_mem")
    assert not h["step"].iloc[1]
    assert "positive" in h["undecided"].iloc[1] and "on A" not in h["undecided"].iloc[1]


def test_history_never_makes_a_step_of_a_night_admission_refused() -> None:
    """A night whose throughput no machine produces (0) is refused: no figure to make a step with, and no outcome
    either (a refusal is not a failure of the cell)."""
    df = long_frame(rows_for("k", [0.0, 0.0, 0.0], run_id="n1", start=1000.0),
                    rows_for("k", [100.0, 101.0, 99.0], run_id="n2", start=2000.0))
    h = history(df)
    assert not h["step"].any()


def test_history_compares_a_loss_only_after_the_same_number_of_steps() -> None:
    """Two nights of one cell whose calibrated windows trained 40 and 73 steps: their losses are not a step of
    the cell's history, whatever the test says (compare and bisect say the same of such a pair)."""
    df = long_frame(_with(rows_for("k", [100.0, 100.5, 99.5], run_id="n1", start=1000.0), loss_end=1.66, steps=40),
                    _with(rows_for("k", [100.0, 100.5, 99.5], run_id="n2", start=2000.0), loss_end=0.39, steps=73))
    df["loss_end"] = df["loss_end"] + np.tile([0.0, 0.01, -0.01], 2)
    h = history(df, metric="loss_end")
    assert not h["step"].iloc[1]
    assert h["undecided"].iloc[1].startswith("not comparable: the final loss comes after different numbers")


def test_a_precision_speed_up_is_a_ratio_of_figures_obtained_the_same_way() -> None:
    """The fp16/fp32 speed-up compare's JSON and the report print pairs two cells as compare does: a throughput
    obtained differently in fp16 (an mllog run_start..run_stop that includes start-up) is not divided by fp32's."""
    def defined(rows: list[dict], how: str) -> list[dict]:
        return [dict(r, metrics={**r["metrics"], "definitions": {"throughput": {"how": how, "unit": "img/s"}}})
                for r in rows]
    df = long_frame(defined(rows_for("f32", [1000.0, 1001.0], run_id="r"), "mllog: mean of tracked_stats"),
                    defined(rows_for("f16", [500.0, 501.0], run_id="r", start=2000.0, precision="fp16"),
                            "mllog: train_samples over run_start..run_stop"),
                    rows_for("g32", [100.0, 101.0], run_id="r", start=3000.0, batch_size=64),
                    rows_for("g16", [150.0, 151.0], run_id="r", start=4000.0, batch_size=64, precision="fp16"))
    ratios = {int(r["batch_size"]): r for r in an.precision_ratios(df).to_dict("records")}
    assert math.isnan(ratios[32]["ratio"])
    assert ratios[32]["why"].startswith("not comparable: the throughput is obtained differently")
    assert ratios[64]["ratio"] == pytest.approx(150.5 / 100.5) and ratios[64]["why"] == ""
    from runner.report.pairs import precision_ratio_table

    table = precision_ratio_table(an.precision_ratios(df, "cpu"), ["cpu"])
    assert [[c.text for c in row[-1:]] for row in table.rows] == [["not comparable"], ["1.50x"]]


def test_a_figure_is_never_labelled_with_a_unit_it_is_not_in() -> None:
    """A grid block whose fp32 throughput is in tok/s and whose fp16 one is in samples/s: each row says its own
    unit (the report used to head both 'img/s', the Metric's default); a side of mixed units says each of them."""
    from runner.analysis.comparable import unit_of
    from runner.report.grid import grid_sections

    def defined(rows: list[dict], unit: str) -> list[dict]:
        return [dict(r, metrics={**r["metrics"], "definitions": {"throughput": {"how": "x", "unit": unit}}})
                for r in rows]
    df = long_frame(defined(rows_for("f32", [1000.0, 1001.0], run_id="r"), "tok/s"),
                    defined(rows_for("f16", [500.0, 501.0], run_id="r", start=2000.0, precision="fp16"), "samples/s"))
    (section,) = grid_sections(an.summarize(df), df)
    assert [row[1].text for row in section.table.rows] == ["throughput (tok/s)", "throughput (samples/s)"]
    assert unit_of(df, an.METRICS["throughput"]) == "tok/s | samples/s"


def test_check_never_pools_two_definitions_of_a_metric_in_one_unit() -> None:
    """`matrix check`: a cell whose repeats obtained the throughput two ways in the same unit (one over the measured
    window, one over the whole run) has no one figure to hold against its reference: not comparable, as compare
    and the gate say of such a side, not a mean of both."""
    from runner.analysis import references as ref
    from tests.analysis.test_references import parse

    m = parse("""
        references:
          - match: {model: wrn, precision: fp32}
            throughput: ">= 100"
    """)
    wrn = next(c for c in m.cells() if c.params["model"] == "wrn" and c.params["precision"] == "fp32")
    rows = rows_for(wrn.key, [150.0, 150.0, 60.0, 60.0], model="wrn")
    for r, how in zip(rows, ["bench: items over the synchronised measured window"] * 2 + ["whole run"] * 2,
                      strict=True):
        r["metrics"]["definitions"] = {"throughput": {"how": how, "unit": "img/s"}}
    (v,) = ref.judge(m.references, m.cells(), long_frame(rows))
    assert v.verdict is Verdict.UNDECIDED and v.reason.startswith("not comparable"), (v.verdict, v.reason)


def test_check_never_averages_losses_taken_after_different_numbers_of_steps() -> None:
    """A cell with calibrated windows whose repeats trained 40 and 73 steps: its final loss has no one value to
    hold against a bound (compare, bisect and history say the same of such figures)."""
    from runner.analysis import references as ref
    from tests.analysis.test_references import parse

    m = parse("""
        references:
          - match: {model: wrn, precision: fp32}
            loss_end: "<= 1.0"
    """)
    wrn = next(c for c in m.cells() if c.params["model"] == "wrn" and c.params["precision"] == "fp32")
    rows = rows_for(wrn.key, [150.0] * 4, model="wrn")
    for r, (loss, steps) in zip(rows, [(1.6, 40), (1.6, 40), (0.3, 73), (0.3, 73)], strict=True):
        r["metrics"].update(loss_end=loss, steps=steps)
    (v,) = ref.judge(m.references, m.cells(), long_frame(rows))
    assert v.verdict is Verdict.UNDECIDED and "different numbers of training steps" in v.reason, (v.verdict, v.reason)
