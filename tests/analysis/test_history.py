"""History: one cell's throughput across runs, with a step marker."""

from __future__ import annotations

import numpy as np

from runner import analysis as an
from runner.analysis.history import history, steps
from tests.analysis.helpers import long_frame, rows_for

NOISE = np.array([0.0, 0.4, -0.4, 0.2, -0.2])


def test_points_are_runs_in_date_order_and_a_real_step_is_marked() -> None:
    df = long_frame(
        rows_for("k", list(100 + NOISE), run_id="night-2", start=2000.0),
        rows_for("k", list(100.3 + NOISE), run_id="night-1", start=1000.0),
        rows_for("k", list(90 + NOISE), run_id="night-3", start=3000.0),
        rows_for("other", [50.0, 51.0], run_id="night-1", start=1000.0, batch_size=64),  # one run: no history
    )
    h = history(df)
    assert list(h["run_id"]) == ["night-1", "night-2", "night-3"]
    assert list(h["step"]) == [False, False, True]
    assert h["change"].iloc[2] == "1.11x slower"
    assert h["ratio"].iloc[2] == np.float64(90 / 100)
    assert list(steps(h)["run_id"]) == ["night-3"]


def test_noise_alone_is_not_a_step() -> None:
    rng = np.random.default_rng(3)
    df = long_frame(*(rows_for("k", list(100 + rng.normal(0, 1, 5)), run_id=f"r{i}", start=1000.0 * i)
                      for i in range(1, 5)))
    h = history(df)
    assert len(h) == 4 and not h["step"].any()


def test_a_night_that_ran_out_of_memory_is_a_step_not_a_gap() -> None:
    """history read only ok repeats: a cell that went from ok to out of memory had no second point, so the
    report's history showed nothing where the cell broke. Its outcomes are compared as the core compares a pair."""
    df = long_frame(rows_for("k", [100.0, 101.0], run_id="a", start=1.0),
                    rows_for("k", [float("nan")] * 2, run_id="b", start=10.0, status="oom"),
                    rows_for("k", [100.5, 100.0], run_id="c", start=20.0))
    h = history(df)
    assert list(h["run_id"]) == ["a", "b", "c"] and list(h["step"]) == [False, True, True]
    assert h["change"].iloc[1] == "regression: here 2 oom (before 2 ok)" and h["outcomes"].iloc[1] == "2 oom"
    assert h["change"].iloc[2].startswith("fixed: before 2 oom") and h["n"].iloc[1] == 0


def test_one_crash_in_a_point_is_undecided_not_passed_over() -> None:
    df = long_frame(rows_for("k", [100.0, 100.4, 99.6], run_id="a", start=1.0),
                    rows_for("k", [100.2, 99.8], run_id="b", start=10.0)
                    + rows_for("k", [float("nan")], run_id="b", start=20.0, status="failed"))
    df.loc[df.index[-1], "repeat"] = 2
    h = history(df)
    assert list(h["step"]) == [False, False]
    assert h["undecided"].iloc[1].startswith("failed here only (3 ok vs 2 ok, 1 failed)")


def test_a_rerun_of_a_failed_repeat_continues_the_point_and_replaces_it() -> None:
    """`--rerun-failed` stores a repeat whose number has a failed row: the same point, the newest row for it."""
    df = long_frame(rows_for("k", [100.0, 100.4, 99.6], run_id="a", start=1.0),
                    rows_for("k", [100.2, 99.8, float("nan")], run_id="b", start=10.0)[:2]
                    + rows_for("k", [float("nan")], run_id="b", start=12.0, status="failed"),
                    rows_for("k", [100.1], run_id="b2", start=30.0))
    df.loc[df["run_id"].eq("b") & df["status"].eq("failed"), "repeat"] = 2
    df.loc[df["run_id"].eq("b2"), "repeat"] = 2
    h = history(df)
    assert list(h["runs"]) == ["a", "b, b2"] and list(h["outcomes"]) == ["3 ok", "3 ok"]
    assert not h["step"].any() and h["undecided"].iloc[1] == ""


def test_the_report_has_a_history_section_table_plot_and_json(tmp_path: object) -> None:
    import json
    from pathlib import Path

    from runner.report import render, views

    df = long_frame(rows_for("k", list(100 + NOISE), run_id="night-1", start=1000.0),
                    rows_for("k", list(90 + NOISE), run_id="night-2", start=90000.0))
    out = Path(str(tmp_path))
    model = views.build(df, [], "nightly", history=history(df))
    written = render.write_report(model, ["md", "html", "json"], out)
    md = (out / "report.md").read_text()
    assert "## History" in md and "step: 1.11x slower" in md and "1 significant step" in md
    assert (out / "plots" / "history.png") in written
    html = (out / "report.html").read_text()
    assert 'id="history"' in html and 'id="chart-history"' in html
    doc = json.loads((out / "report.json").read_text())
    assert [p["step"] for p in doc["history"]] == [False, True]
    plain = views.build(df[df["run_id"] == "night-1"], [], "one run", history=history(df[df["run_id"] == "night-1"]))
    assert plain.history == []


def _repeats(rows: list[dict], first: int) -> list[dict]:
    return [{**r, "repeat": first + i} for i, r in enumerate(rows)]


def test_a_resumed_run_is_one_measurement_and_force_is_the_next() -> None:
    """Interrupted after two repeats (run a), resumed for the other two (run b): one point, so no step can
    come from the resume alone even when the machine got slower in between (it used to be marked one).
    `--force` (run c re-measures repeats 0-3) is the next point."""
    df = long_frame(
        rows_for("k", [100.0, 100.4], run_id="a", start=1000.0),
        _repeats(rows_for("k", [80.0, 80.3], run_id="b", start=2000.0), 2),
        rows_for("k", [90.0, 90.3, 89.8, 90.1], run_id="c", start=3000.0),
    )
    resumed_only = df[df["run_id"] != "c"]
    assert history(resumed_only).empty  # one measurement: no history, no step
    h = history(df)
    assert list(h["runs"]) == ["a, b", "c"] and list(h["n"]) == [4, 4] and list(h["run_id"]) == ["a", "c"]


def test_rerun_failed_and_more_repeats_continue_the_measurement() -> None:
    df = long_frame(
        rows_for("k", [100.0, 100.5], run_id="a", start=1000.0),
        _repeats(rows_for("k", [float("nan")], run_id="a", start=1100.0, status="failed"), 2),
        _repeats(rows_for("k", [99.5], run_id="b", start=2000.0), 2),   # --rerun-failed fills repeat 3
        _repeats(rows_for("k", [100.2, 99.9], run_id="c", start=3000.0), 3),  # repeats: 5 in a later run
    )
    assert history(df).empty


def test_two_definitions_of_one_name_are_two_histories_labelled_by_key() -> None:
    from runner.report.decisions import history_table

    df = long_frame(rows_for("old", [100.0, 100.2], run_id="a", start=1000.0),
                    rows_for("old", [100.1, 100.3], run_id="b", start=2000.0),
                    rows_for("new", [200.0, 200.2], run_id="c", start=3000.0),
                    rows_for("new", [200.1, 200.3], run_id="d", start=4000.0))
    h = history(df)
    assert list(h["cell_key"]) == ["old", "old", "new", "new"] and not h["step"].any()
    labels = [row[0].text for row in history_table(h).rows if row[0].text]
    assert labels == ["cpu mnist_cnn fp32 32 (definition old)", "cpu mnist_cnn fp32 32 (definition new)"]


def test_a_point_that_cannot_be_tested_says_undecided_not_no_step() -> None:
    from runner.report.decisions import history_table

    df = long_frame(rows_for("k", [100.0], run_id="a", start=1000.0), rows_for("k", [50.0], run_id="b", start=2000.0))
    h = history(df)
    assert not h["step"].any() and h["undecided"].iloc[1].startswith("1 ok repeat before and 1 ok repeat here")
    assert history_table(h).rows[1][-1].text.startswith("undecided: 1 ok repeat before")


def test_a_change_of_how_the_metric_is_obtained_is_not_a_step() -> None:
    """A parser that switched from tracked_stats to train_samples over the whole run halves the figure: not a
    step of the cell's speed, the point says why it was not compared."""
    later = rows_for("k", list(50 + NOISE), run_id="night-2", start=2000.0)
    for r in later:
        r["metrics"]["definitions"] = {"throughput": {"how": "mllog: train_samples / (run_stop - run_start)",
                                                      "unit": "samples/s"}}
    h = history(long_frame(rows_for("k", list(100 + NOISE), run_id="night-1", start=1000.0), later))
    assert list(h["step"]) == [False, False]
    assert h["undecided"].iloc[1].startswith("not comparable: the throughput is obtained differently")


def test_a_definition_naming_a_or_b_is_quoted_as_written() -> None:
    """The substitution of the core's side words (A -> before, B -> here) ran over the whole sentence, the
    definitions the results wrote included: 'timer on A100' was printed as 'timer before100'."""
    a, b = rows_for("k", [100.0, 101.0], run_id="a", start=1.0), rows_for("k", [100.0, 101.0], run_id="b", start=10.0)
    for rows, how in ((a, "mllog: samples on A over time B"), (b, "timer on A100")):
        for r in rows:
            r["metrics"]["definitions"] = {"throughput": {"how": how, "unit": "samples/s"}}
    why = history(long_frame(a, b))["undecided"].iloc[1]
    assert "(mllog: samples on A over time B [samples/s] vs timer on A100 [samples/s])" in why


def test_a_transformer_history_is_labelled_in_its_own_unit() -> None:
    """The history table's mean was headed 'img/s' whatever the cell measured (a gpt_tiny cell's tok/s included):
    the history frame carried no unit, the table defaulted to img/s and the plot to the metric's."""
    from runner.report.decisions import history_table

    df = long_frame(rows_for("k", [100.0, 101.0], run_id="a", start=1.0, model="gpt_tiny"),
                    rows_for("k", [90.0, 91.0], run_id="b", start=10.0, model="gpt_tiny"))
    h = history(df)
    assert list(h["unit"]) == ["tok/s", "tok/s"]
    assert "mean ± std (tok/s)" in history_table(h).columns


def test_ok_repeats_without_a_figure_are_refused_not_counted_ok() -> None:
    """A stored ok with no throughput (null) measured nothing: admission refuses it ("no figure"), so a night of them
    is no night of ok repeats the next one is compared with (it was '2 ok' beside no figure)."""
    df = long_frame(rows_for("k", [None, None], run_id="a", start=1.0),  # type: ignore[list-item]
                    rows_for("k", [100.0, 101.0], run_id="b", start=10.0),
                    rows_for("k", [100.0, 102.0], run_id="c", start=20.0))
    assert set(df.loc[df["run_id"] == "a", "status"]) == {"refused"}
    assert df.loc[df["run_id"] == "a", "reason"].str.startswith("no figure: the result holds no throughput").all()
    h = history(df)
    assert list(h["run_id"]) == ["b", "c"] and list(h["outcomes"]) == ["2 ok", "2 ok"] and not h["step"].any()


def test_the_plot_names_the_rings_when_only_a_later_line_has_a_step() -> None:
    """The legend's 'significant step' was given to the first line's rings only: a step on any other line was a
    red ring the legend did not explain."""
    from runner.report import chartdata, charts

    m = an.METRICS["throughput"]
    df = long_frame(rows_for("flat", list(100 + NOISE), run_id="a", start=1000.0),
                    rows_for("flat", list(100.2 + NOISE), run_id="b", start=2000.0),
                    rows_for("fell", list(100 + NOISE), run_id="a", start=1000.0, batch_size=64),
                    rows_for("fell", list(80 + NOISE), run_id="b", start=2000.0, batch_size=64))
    h = history(df)
    assert list(h["step"]) == [False, False, False, True]
    chart = charts.history(chartdata.history_points(h, m, "img/s"), m, "img/s")
    assert chart is not None
    (rings,) = [layer for layer in chart.spec["layer"] if layer.get("name") == "rings"]
    assert rings["encoding"]["stroke"]["title"] == "step against the run before"   # the legend names the rings
    assert [v["tone"] for v in chart.spec["datasets"][charts.DATA] if v["step"]] == ["worse"]


def test_a_point_stored_without_a_start_is_listed_with_a_dash_not_a_traceback() -> None:
    """A result row without started_at (the column allows NULL), or with one past any date, made the report's
    history table a ValueError or OverflowError traceback and its plot a matplotlib conversion error."""
    from runner.report import chartdata, charts
    from runner.report.decisions import history_table

    for bad in (None, float("nan"), 1e30):
        later = rows_for("k", [90.0, 91.0], run_id="b", start=10.0)
        for r in later:
            r["started_at"] = bad
        h = history(long_frame(rows_for("k", [100.0, 101.0], run_id="a", start=1.0), later))
        assert history_table(h).rows[1][1].text == "—"
        m = an.METRICS["throughput"]
        points = chartdata.history_points(h, m, "img/s")
        assert charts.history(points, m, "img/s") is not None and not isinstance(points["when"].iloc[1], str)
