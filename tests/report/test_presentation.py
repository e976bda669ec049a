"""One presentation of a verdict (runner/report/tone.py): colours and signs from the decision core's typed result,
never from its words; the charts' specs are Vega-Lite's and none carries one point; the counts and formats the
pages share (runs, repeats from 1, ISO 8601 times, compare's counts)."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

import jsonschema
import pandas as pd
import pytest

from runner import analysis as an
from runner.report import charts
from runner.report.head import run_status
from runner.report.tone import Tone, of_pair, of_point, pair_said, say
from tests.analysis.helpers import rows_for, store_of

M = an.METRICS["throughput"]
TIME = an.METRICS["iter_time"]


def pair(**row: object) -> dict[str, object]:
    return {"decision": "fail", "ratio": 1.22, "verdict": "", "a_statuses": "3 ok", "b_statuses": "3 ok", **row}


def test_the_tone_is_the_verdicts_never_its_words() -> None:
    """The site painted '1.22x faster' red because its words did not start with 'faster': the tone comes from the
    decision, the ratio and the metric's direction, whatever the words say."""
    assert of_pair(pair(verdict="1.22x faster (p=0.0049)"), M) is Tone.BETTER
    assert of_pair(pair(verdict="slower"), M) is Tone.BETTER              # words that lie change nothing
    assert of_pair(pair(ratio=0.8, verdict="faster"), M) is Tone.WORSE
    assert of_pair(pair(ratio=1.22), TIME) is Tone.WORSE                 # a longer time per iteration is worse
    assert of_pair(pair(decision="pass", ratio=1.5), M) is Tone.SAME
    assert of_pair(pair(decision="undecided"), M) is Tone.UNDECIDED
    # A change of outcomes has no ratio: its direction is the core's (comparable.outcome_change), not 'fixed: ...'.
    assert of_pair(pair(ratio=math.nan, a_statuses="3 oom", b_statuses="3 ok", verdict="regression"), M) is Tone.BETTER
    assert of_pair(pair(ratio=math.nan, a_statuses="3 ok", b_statuses="3 oom", verdict="fixed"), M) is Tone.WORSE
    # The history's step, by its typed direction.
    assert of_point({"step": True, "direction": "better", "change": "1.3x slower"}) is Tone.BETTER
    assert of_point({"step": False, "undecided": "1 ok repeat before", "ratio": 1.1}) is Tone.UNDECIDED
    assert of_point({"step": False, "ratio": 1.01, "p_value": 0.5}) is Tone.SAME
    assert of_point({"step": False, "ratio": math.nan, "p_value": math.nan, "point": 0}) is Tone.NONE


def test_a_sentence_states_the_change_its_interval_and_p() -> None:
    said = pair_said(pair(ratio=1.41, ratio_low=1.32, ratio_high=1.50, p_adjusted=0.0004), M, "bf16", "fp32",
                     "for wrn at batch 64")
    assert said.sentence == "bf16 is 1.41x faster than fp32 for wrn at batch 64 (1.32–1.50, p<0.001)."
    slower = say(Tone.WORSE, 0.8, 0.75, 0.85, 0.01, M, "B", "A")
    assert slower.sentence == "B is 1.25x slower than A (1.18–1.33, p=0.010)."   # the interval of the words' ratio
    same = say(Tone.SAME, 0.99, 0.95, 1.03, 0.6, M, "B", "A")
    assert same.sentence == "B against A: the same within ±2% (B/A 0.99, 0.95–1.03, p=0.600)."
    undecided = pair_said(pair(decision="undecided", verdict="undecided: 1 ok repeat on B", needed=5.0), M, "x", "y")
    assert undecided.sentence == "x against y is undecided: 1 ok repeat on x; about 5 repeats a side would decide it."


def test_a_run_is_complete_only_when_every_repeat_it_stored_ended() -> None:
    assert run_status("complete", {"ok": 24}) == "complete"
    assert run_status("complete", {"ok": 18, "not_started": 30}) == "incomplete: 30 not_started"
    assert run_status("interrupted", {"not_started": 2}) == "interrupted"


def history_rows(n: int, step_at: int | None = None) -> pd.DataFrame:
    return pd.DataFrame([{"series": "s", "when": f"2026-11-0{i + 1}T00:00:00Z", "seq": i, "mean": 100.0 + i,
                          "ci_low": 98.0 + i, "ci_high": 102.0 + i, "tone": "better" if i == step_at else "same",
                          "step": i == step_at, "tip": f"run {i}"} for i in range(n)])


def test_a_chart_that_would_carry_one_point_is_not_made() -> None:
    assert charts.history(history_rows(1), M, "img/s") is None
    assert charts.history(history_rows(2), M, "img/s") is not None
    one = pd.DataFrame([{"label": "a", "ratio": 1.2, "ratio_low": 1.1, "ratio_high": 1.3, "tone": "better",
                         "sentence": "s"}])
    assert charts.ratios(one, M) is None and charts.ratios(pd.concat([one, one.assign(label="b")]), M) is not None
    summary = pd.DataFrame([{"environment": "e", "model": "m", "dataset": "", "options": "", "precision": p,
                             "batch_size": 32, "gpus": 1, "nodes": 1, "throughput_n": 3, "throughput_mean": 100.0,
                             "throughput_ci_low": 90.0, "throughput_ci_high": 110.0} for p in ("fp32", "bf16")])
    assert charts.by_batch(summary, M, "img/s") is None            # one batch size: no line to draw
    assert charts.by_batch(pd.concat([summary, summary.assign(batch_size=64)]), M, "img/s") is not None


def test_every_kind_of_chart_is_a_valid_vega_lite_spec() -> None:
    """The specs are written as plain dicts, with no validation at run time: their shapes are checked here, against
    the Vega-Lite schema Altair ships (a test dependency), and they name that schema's version."""
    from altair.vegalite.v6.schema import load_schema

    schema = load_schema()
    ratios = pd.DataFrame([{"label": x, "ratio": r, "ratio_low": r * 0.9, "ratio_high": r * 1.1, "tone": t,
                            "sentence": x} for x, r, t in (("a", 1.3, "better"), ("b", 0.7, "worse"))])
    latest = pd.DataFrame([{"label": x, "machine": "m", "mean": 100.0, "ci_low": 90.0, "ci_high": 110.0, "tone": "same",
                            "tip": x} for x in ("a", "b")])
    summary = pd.DataFrame([{"environment": "e", "model": "m", "dataset": "", "options": "", "precision": "fp32",
                             "batch_size": b, "gpus": 1, "nodes": 1, "throughput_n": 3, "throughput_mean": 100.0,
                             "throughput_ci_low": 90.0, "throughput_ci_high": 110.0} for b in (32, 64)])
    scale = pd.DataFrame([{"environment": "e", "model": "m", "precision": "fp32", "batch_size": 8, "dataset": "",
                           "options": "", "processes": p, "speedup": p * 0.9, "efficiency": 0.9,
                           "throughput_mean": 100.0 * p, "throughput_ci_low": 90.0 * p, "throughput_ci_high": 110.0 * p}
                          for p in (1, 2)])
    made = [charts.ratios(ratios, M), charts.history(history_rows(3, step_at=2), M, "img/s"),
            charts.latest(latest, M, "img/s"), charts.by_batch(summary, M, "img/s"), charts.speedup(scale)]
    import altair

    assert charts.VEGA_LITE.split(".")[0] == altair.SCHEMA_VERSION.split(".")[0]  # the schema checked is theirs
    for chart in made:
        assert chart is not None
        assert chart.spec["$schema"] == f"https://vega.github.io/schema/vega-lite/{charts.VEGA_LITE}.json"
        jsonschema.validate(chart.spec, schema)
    bad = dict(made[0].spec, mark="not a mark")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_a_report_counts_every_run_and_writes_repeats_from_1_and_iso_times(tmp_path: Path) -> None:
    """After four runs the header said '3 repeats in 1 cell' and named one run; repeats.csv numbered its repeats from
    0 and wrote epoch floats."""
    from runner.report import report_command

    rows = [r for i, night in enumerate("abcd") for r in rows_for("k", [100.0 + i, 101.0 + i, 99.0 + i],
                                                                    run_id=f"2026-{night}", start=1.8e9 + i * 86400)]
    db = store_of(tmp_path / "s.db", rows)
    report_command(db, None, ["md", "csv"], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert md.splitlines()[2].startswith("4 runs stored 12 repeats; the tables show 3 of them")
    runs = md.split("## Runs\n", 1)[1].split("\n## ", 1)[0]
    assert all(f"2026-{n}" in runs for n in "abcd")
    table = list(csv.DictReader(io.StringIO((tmp_path / "out" / "repeats.csv").read_text())))
    assert sorted({r["repeat"] for r in table}) == ["1", "2", "3"]
    assert {r["started_at"][:10] for r in table} == {"2027-01-18"}   # each repeat's newest row: the 4th run's
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["started_at"]) for r in table)


def test_compare_counts_a_pair_not_comparable_as_such() -> None:
    """A row said 'not comparable: run settings differ' and the line under the table counted it 'not measured on both
    sides'."""
    from runner.report.pairs import geomean_sentence

    df = an.frame(an.StoredRepeat.many(rows_for("a", [100.0, 101.0], environment="x") +
                                       rows_for("b", [110.0, 111.0], environment="y", start=2000.0) +
                                       rows_for("c", [100.0, 100.5], environment="x", batch_size=64) +
                                       rows_for("d", [50.0, 51.0], environment="y", batch_size=64, start=3000.0)))
    df["settings"] = ["iterations=50" if k == "d" else "iterations=20" for k in df["cell_key"]]
    c = an.compare(an.select_side(df, "x"), an.select_side(df, "y"))
    assert geomean_sentence(c, "x", "y").startswith("Geometric mean of y/x over 1 of 2 pairs (1 not comparable)")


def test_no_part_of_a_chart_is_shared_with_another_chart_or_layer() -> None:
    """The specs are built from channels and a look used by every layer and chart: each chart holds its own copy."""
    import json

    scale = pd.DataFrame([{"environment": "e", "model": "m", "precision": "fp32", "batch_size": 8, "dataset": "",
                           "options": "", "processes": p, "speedup": p * 0.9, "efficiency": 0.9,
                           "throughput_mean": 100.0 * p, "throughput_ci_low": 90.0 * p, "throughput_ci_high": 110.0 * p}
                          for p in (1, 2)])
    one, two = charts.speedup(scale), charts.speedup(scale)
    assert one is not None and two is not None
    before = json.dumps(two.spec, sort_keys=True)
    layers = one.spec["layer"]
    layers[1]["encoding"]["x"]["title"] = "changed"
    layers[1]["data"]["name"] = "changed"
    one.spec["config"]["axis"]["labelFontSize"] = 99
    assert layers[2]["encoding"]["x"]["title"] != "changed" and layers[2]["data"]["name"] == charts.DATA
    assert json.dumps(two.spec, sort_keys=True) == before
    assert charts.CONFIG["axis"]["labelFontSize"] == 11
