"""Admission (runner/record/admission.py): a stored repeat reaches a verdict only when it proves it measured what
it claims. The rows here are shaped as the store holds them, several copied from the first run on an H100 (a plain
AMP recipe whose loss went NaN at step 5 and was stored ok; windows of 0.27-0.32 s where 2.2 s was asked)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from runner import analysis as an
from runner.analysis import gate
from runner.analysis.verdict import Verdict
from runner.record import admission
from runner.record.repeat import Repeat
from runner.record.stored import StoredRepeat
from tests.analysis.helpers import long_frame, rows_for, store_of


def gpu_row(**metrics: Any) -> dict[str, Any]:
    """A ResNet-50 repeat as the H100 stored it: iterations auto (at least 2.2 s), 5 iterations calibrated."""
    m = {"throughput": 4533.74, "window_s": 0.2823, "images": 4533.74 * 0.2823, "iterations": 5,
         "losses": [7.08, 7.05, None, None, None], "loss_at": {"1": 7.03, "2": 7.08, "5": None, "6": None},
         "loss_start": 7.03, "loss_end": None,
         "calibration": {"iterations": 5, "iter_s": 23.73, "min_time": 2.2, "least": 5, "most": 100000}}
    m.update(metrics)
    return {"id": 1, "run_id": "r", "cell_key": "k", "repeat": 0, "environment": "local-gpu", "backend": "local",
            "params": {"model": "resnet50", "precision": "amp", "batch_size": 256, "dataset": "synthetic"},
            "status": "ok", "metrics": m,
            "raw": {"params": {"window_time": 2.2, "window_min": 5, "window_max": 100000, "iterations": 5}}}


def test_a_training_whose_loss_went_nan_is_diverged_not_ok() -> None:
    rep = Repeat.of(StoredRepeat.of(gpu_row()))
    assert rep.status == "diverged" and rep.stored_status == "ok"
    assert "NaN or infinite by training step 5" in rep.reason and "3 of the window's 5 losses" in rep.reason
    assert not rep.ok


def test_the_benchmarks_own_finite_record_is_what_counts() -> None:
    """bench checks every step (metrics.finite); its word is taken over the kept losses."""
    bad = Repeat.of(StoredRepeat.of(gpu_row(finite={"all": False, "first_nonfinite_step": 3, "phase": "warmup"},
                                  losses=[6.9] * 5, loss_at={"1": 7.0}, loss_end=6.9)))
    assert bad.status == "diverged" and "step 3 (warmup)" in bad.reason
    good = Repeat.of(StoredRepeat.of(gpu_row(finite={"all": True, "checked_steps": 11}, losses=[6.9] * 5, loss_at={"1": 7.0},
                                   loss_end=6.9, window_s=2.3, images=4533.74 * 2.3)))
    assert good.status == "ok"


def test_a_window_shorter_than_promised_is_refused_and_one_that_kept_it_admitted() -> None:
    finite = {"losses": [6.9] * 5, "loss_at": {"1": 7.0, "5": 6.9}, "loss_end": 6.9}
    short = Repeat.of(StoredRepeat.of(gpu_row(**finite, window_s=0.3165, images=4044.16 * 0.3165, throughput=4044.16)))
    assert short.status == "refused" and short.reason == "window 0.317 s, at least 2.2 s asked (5 iterations)"
    kept = Repeat.of(StoredRepeat.of(gpu_row(**finite, window_s=2.2338, images=5730.26 * 2.2338, throughput=5730.26,
                                   iterations=50)))
    assert kept.status == "ok"


def test_a_window_short_because_its_count_reached_the_ceiling_is_admitted_with_a_note() -> None:
    row = gpu_row(losses=[6.9] * 5, loss_at={"1": 7.0}, loss_end=6.9, window_s=0.5, images=4533.74 * 0.5,
                  calibration={"iterations": 5, "most": 5, "capped": True})
    row["raw"]["params"]["window_max"] = 5
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "ok"
    assert any(c.name == "window" and "ceiling of 5 iterations" in c.detail for c in rep.checks)


def test_a_fixed_count_measured_short_is_refused() -> None:
    row = rows_for("k", [100.0])[0]
    row["metrics"]["iterations"] = 3
    row["raw"] = {"params": {"iterations": 20, "warmup": 5, "seed": 0}}
    assert Repeat.of(StoredRepeat.of(row)).reason == "measured 3 of the 20 iterations asked"


def test_a_loss_scaler_that_skipped_most_steps_did_not_train() -> None:
    row = rows_for("k", [100.0])[0]
    row["metrics"]["scaler"] = {"kind": "dynamic", "skipped_window": 30, "window_steps": 50}
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "refused" and "skipped 30 of the window's 50 optimizer steps: not training" in rep.reason
    row["metrics"]["scaler"] = {"kind": "dynamic", "skipped_window": 2, "window_steps": 50}
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "ok" and "skipped 2 of the window's 50" in admission.Admission(
        rep.status, "ok", rep.checks).notes


@pytest.mark.parametrize(("metrics", "words"), [
    ({"throughput": 1.7e308, "images": 1.7e308}, "outside what a machine can reach"),
    ({"throughput": 5e6, "images": 100.0}, "not the result's own items over its window"),
    ({"throughput": math.inf}, "is not a finite number"),
    ({"throughput": "fast"}, "is not a finite number"),
])
def test_a_figure_no_machine_produces_is_refused(metrics: dict[str, Any], words: str) -> None:
    row = rows_for("k", [100.0])[0]
    row["metrics"].update(metrics)
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "refused" and words in rep.reason, rep.reason


def test_an_mfu_above_one_is_left_out_alone() -> None:
    """A peak that was wrong makes the MFU impossible, not the throughput: the figure goes, the repeat stays."""
    row = rows_for("k", [100.0])[0]
    row["metrics"]["mfu"] = 1.7
    df = long_frame([row])
    assert df["status"].iloc[0] == "ok" and math.isnan(df["mfu"].iloc[0])
    assert "mfu 1.7" in df["admission"].iloc[0]


def test_every_other_status_is_what_it_was() -> None:
    for status in ("oom", "failed", "timeout", "unsupported", "cancelled", "not_started", "skipped"):
        row = dict(rows_for("k", [0.0], status=status)[0])
        assert Repeat.of(StoredRepeat.of(row)).status == status


def diverged_rows(key: str, n: int, **kw: Any) -> list[dict[str, Any]]:
    rows = rows_for(key, [4700.0 + i for i in range(n)], **kw)
    for r in rows:
        r["metrics"].update(images=r["metrics"]["throughput"], losses=[7.0, None], loss_at={"1": 7.0, "2": None})
    return rows


def test_a_diverged_side_is_no_pairs_figure_and_an_outcome_in_every_command() -> None:
    """The H100's plain row (NaN, 10% faster) against a finite one: compare and the gate never rank its speed;
    they call the pair what it is, a regression of outcome, in the same words."""
    a = rows_for("k", [4450.0, 4460.0, 4440.0], run_id="ra", environment="A")
    for r in a:
        r["metrics"]["images"] = r["metrics"]["throughput"]
    df = long_frame(a, diverged_rows("k", 3, run_id="rb", environment="B", start=2000.0))
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B")).pairs.to_dict("records")
    assert math.isnan(pair["b_mean"]) and pair["b_n"] == 0
    assert pair["verdict"] == "regression: B 3 diverged (A 3 ok)" and pair["decision"] == "fail"
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.05)])
    assert check.verdict is Verdict.FAIL and check.reason == pair["verdict"]
    # Asked the other way ("is B faster?"), a diverged B is not faster, whatever its img/s said.
    (faster,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("faster", 0.05)])
    assert faster.verdict is not Verdict.FAIL


def test_a_refused_side_is_undecided_in_every_command_never_a_verdict() -> None:
    a = rows_for("k", [100.0, 101.0, 99.0], run_id="ra", environment="A")
    b = rows_for("k", [120.0, 121.0, 119.0], run_id="rb", environment="B", start=2000.0)
    for r in b:
        r["metrics"].update(iterations=3)
        r["raw"] = {"params": {"iterations": 20}}
    df = long_frame(a, b)
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B")).pairs.to_dict("records")
    assert pair["decision"] == "undecided" and pair["verdict"].startswith("no admitted repeat on B (3 refused")
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.05)])
    assert check.verdict is Verdict.UNDECIDED and check.reason == pair["verdict"]
    assert "with no admitted repeat on a side" in gate.summary_line([gate.Rule("slower", 0.05)], [check])


def test_the_report_lists_what_was_set_aside_and_why() -> None:
    from runner.report.views import build

    df = long_frame(rows_for("k", [100.0, 101.0], run_id="ra", environment="A"), [gpu_row()])
    model = build(df, [], "t")
    built = model.built("admission")
    assert built is not None and built.shown
    (row,) = built.frame.to_dict("records")
    assert row["status"] == "diverged" and row["stored_status"] == "ok"
    assert "1 diverged" in model.totals


def test_compare_and_its_gate_say_one_threshold_in_one_output(tmp_path: Path) -> None:
    """A 1.6% slowdown, significant: the gate at slower:1% fails it, so the table above it may not call it "not
    significant (change < 2%)"; a --min-effect that says another threshold is refused."""
    from typer.testing import CliRunner

    from runner import cli

    a = rows_for("k", [1000.0, 1001.0, 999.0, 1000.5], run_id="ra", environment="A")
    b = rows_for("k", [984.0, 985.0, 983.0, 984.5], run_id="rb", environment="B", start=2000.0)
    for r in a + b:
        r["metrics"]["images"] = r["metrics"]["throughput"]
    db = store_of(tmp_path / "s.db", a + b)
    out = CliRunner().invoke(cli.app, ["compare", "A", "B", "--db", str(db), "--fail-on", "slower:1%"],
                             terminal_width=250)
    assert out.exit_code == 1, out.output
    assert "change < 2%" not in out.output and "slower" in out.output
    assert "1 failed" in out.output
    refused = CliRunner().invoke(cli.app, ["compare", "A", "B", "--db", str(db), "--fail-on", "slower:1%",
                                           "--min-effect", "0.02"])
    assert refused.exit_code == 2 and "two thresholds" in refused.output
    alone = CliRunner().invoke(cli.app, ["compare", "A", "B", "--db", str(db)], terminal_width=250)
    assert alone.exit_code == 0 and "same (within ±2%)" in alone.output


def test_a_loss_scale_that_fell_to_zero_trained_nothing() -> None:
    """A GradScaler that overflows at every step halves its scale to 0 in ~166 steps; after that no step backs it
    off, so a count of skipped steps alone went blind (116 of 1000 counted while all 1000 skipped)."""
    row = rows_for("k", [100.0])[0]
    row["metrics"]["scaler"] = {"kind": "dynamic", "skipped_window": 116, "window_steps": 1000, "scale_end": 0.0}
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "refused" and "loss scale fell to 0" in rep.reason


def test_a_result_from_before_windows_were_completed_is_held_to_its_promise_less_noise() -> None:
    """Later repeats of an old `iterations: auto` cell ran the first one's count: a window 10% short is the run's
    noise (refusing it, a fast one, would keep the slow ones), a window at 40% of the time was sized wrong."""
    def old(window: float) -> dict[str, Any]:
        row = rows_for("k", [100.0])[0]
        row["metrics"].update(window_s=window, images=100.0 * window, iterations=50)
        row["raw"] = {"params": {"window_time": 1.0, "window_min": 2, "window_max": 10000, "iterations": 50}}
        return row
    noisy = Repeat.of(StoredRepeat.of(old(0.9)))
    assert noisy.status == "ok" and any("short by the run's own noise" in c.detail for c in noisy.checks)
    assert Repeat.of(StoredRepeat.of(old(0.4))).status == "refused"
    new = old(0.9)
    new["metrics"]["window_asked_s"] = 1.0  # a benchmark that completes its windows promised the whole second
    assert Repeat.of(StoredRepeat.of(new)).status == "refused"


def test_rows_walked_by_hand_do_not_carry_a_figure_admission_left_out() -> None:
    """The kit reads raw metrics (runner/kit/cell_results.py): an MFU above 1 was printed as 135% beside '2 ok'."""
    from runner.analysis import admitted

    row = rows_for("k", [100.0])[0]
    row["metrics"].update(mfu=1.35, images=100.0)
    (seen,) = admitted([StoredRepeat.of(row)])
    assert seen.status == "ok" and seen.metrics["mfu"] is None and seen.metrics["throughput"] == 100.0
    assert seen.stored.metrics["mfu"] == 1.35, "the stored repeat keeps what was measured"


def test_rerun_failed_measures_again_what_admission_set_aside(tmp_path: Path) -> None:
    """A stored ok repeat admission refuses (it measured fewer iterations than asked) is measured again by
    `--rerun-failed`: the claim used to ask the store, which only knows it said ok, and nothing ran."""
    import json
    import sqlite3

    from typer.testing import CliRunner

    from runner import cli

    m = tmp_path / "m.yaml"
    m.write_text("environments: [{name: cpu, backend: local}]\n"
                 "axes: {model: [mlp], precision: [fp32], batch_size: [8], dataset: [synthetic], device: [cpu]}\n"
                 "run: {iterations: 5, warmup: 1, repeats: 1}\n")
    db = tmp_path / "r.db"
    first = CliRunner().invoke(cli.app, ["run", "-m", str(m), "--db", str(db)])
    assert first.exit_code == 0, first.output
    with sqlite3.connect(db) as con:  # the store is append-only: a newer row of the repeat, as an older matrix stored
        con.row_factory = sqlite3.Row
        row = dict(con.execute("SELECT * FROM results").fetchone())
        row.pop("id")
        row["metrics"] = json.dumps(dict(json.loads(row["metrics"]), iterations=4))
        con.execute(f"INSERT INTO results ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
    again = CliRunner().invoke(cli.app, ["run", "-m", str(m), "--db", str(db)])
    assert again.exit_code == 3 and "refused" in again.output, again.output
    fixed = CliRunner().invoke(cli.app, ["run", "-m", str(m), "--db", str(db), "--rerun-failed"])
    assert fixed.exit_code == 0, fixed.output
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(*) FROM results").fetchone()[0] == 3


@pytest.mark.parametrize(("metrics", "words"), [
    ({}, "no figure: the result holds no throughput"),
    ({"window_s": 1.0, "iterations": 20}, "no figure: the result holds no throughput"),
    ({"throughput": 0.0, "window_s": 1.0}, "no figure: the result holds no throughput"),
    ({"throughput": 40.0, "window_s": 0.0}, "no figure: a window of 0 s measured nothing"),
], ids=["empty", "window-only", "zero", "zero-window"])
def test_an_ok_with_nothing_measured_is_refused_not_counted_ok(metrics: dict[str, Any], words: str) -> None:
    """A check that cannot be made is no pass: an ok with no figure (or a window of 0 s, a ceiling reached or not)
    was counted ok beside the figures it did not have ('5 ok' over a mean of 4)."""
    row = rows_for("k", [1.0])[0]
    row["metrics"] = metrics
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "refused" and rep.reason.startswith(words) and not rep.ok
    # A capped window (its count at the ceiling) of 0 s is no window either.
    capped = gpu_row(throughput=40.0, window_s=0.0, images=0.0, losses=[7.0], loss_at={"1": 7.0},
                     calibration={"iterations": 100000, "capped": True, "most": 100000})
    assert Repeat.of(StoredRepeat.of(capped)).status == "refused"


def test_a_programs_ok_needs_one_figure_its_parser_read() -> None:
    row = rows_for("k", [1.0])[0]
    row["raw"] = {"workload": {"parser": "pattern"}, "params": {}}
    row["metrics"] = {"steps": 20}
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "refused" and "no figure: the program's output held none" in rep.reason
    row["metrics"] = {"throughput": 12.5}
    assert Repeat.of(StoredRepeat.of(row)).ok


@pytest.mark.parametrize("said", [True, "false", 1, None])
def test_a_finite_record_is_not_believed_beside_a_kept_nan(said: Any) -> None:
    """bench's `metrics.finite` names where a loss first was not finite; a record saying anything but a plain false
    (an edited or imported file) beside a NaN kept among the losses is not believed."""
    rep = Repeat.of(StoredRepeat.of(gpu_row(finite={"all": said}, window_s=2.3, images=4533.74 * 2.3)))
    assert rep.status == "diverged" and "NaN or infinite by training step 5" in rep.reason
    fine = gpu_row(finite={"all": said}, window_s=2.3, images=4533.74 * 2.3, losses=[7.08, 7.05, 7.0, 6.9, 6.8],
                   loss_at={"1": 7.03, "2": 7.08, "5": 6.8})
    assert Repeat.of(StoredRepeat.of(fine)).ok


def program_row(metrics: dict[str, Any], program_s: float = 30.0) -> dict[str, Any]:
    """A user's program's repeat as the launcher stores it (its parser named in raw.workload)."""
    row = rows_for("k", [1.0])[0]
    row["metrics"] = {"window_s": None, **metrics}
    row["raw"] = {"params": {}, "workload": {"parser": "pattern", "program_s": program_s}}
    return row


def seen(losses: list[float], source: str = "pattern: figure loss") -> dict[str, Any]:
    """metrics.loss_seen as the launcher records it (runner/bench/readings.py LossSeen)."""
    from runner.bench.readings import LossSeen

    kept = LossSeen(source)
    for v in losses:
        kept.add(v)
    record = kept.record()
    assert record is not None
    return record


@pytest.mark.parametrize(("losses", "exploded", "words"), [
    ([2.3, 2.3e30], True, "the loss grew 1e+30-fold, from 2.3 (the 1st of the 2 losses read (pattern: figure loss)) "
                          "to 2.3e+30 (the 2nd); "),
    ([2.5, 2500.0], False, ""),                       # exactly 1,000-fold: the rule is "more than"
    ([2.5, 2500.1], True, "1e+03-fold"),
    ([0.001, 5.0], False, ""),                        # near zero: held to 1, so 5,000x of 0.001 is not exploding
    ([0.001, 1500.0], True, "1.5e+03-fold, from 0.001, counted as 1 (the 1st"),
    ([0.0, 0.5, 999.0], False, ""),                   # a first loss of exactly 0
    ([-5.0, -40.0], False, ""),                       # a negative objective falling as it should
    ([-5.0, -6000.0], True, "the loss's magnitude grew 1.2e+03-fold, from -5 "),
    ([-5.0, 5001.0], True, "the loss grew 1e+03-fold, from -5 "),
    ([1e6, 3.0, 9e8], False, ""),                     # a large first loss: judged on its own scale
    ([10.0, 0.001], False, ""),                       # a falling loss
], ids=["issue", "at-1000x", "over-1000x", "near-zero", "near-zero-far", "zero", "negative", "negative-runaway",
        "sign-flip", "large-start", "falling"])
def test_an_exploding_loss_is_diverged_by_one_documented_rule(losses: list[float], exploded: bool, words: str) -> None:
    rep = Repeat.of(StoredRepeat.of(program_row({"throughput": 50.0, "loss_seen": seen(losses)})))
    if exploded:
        assert rep.status == "diverged" and rep.reason.startswith("diverged: ") and words in rep.reason, rep.reason
        assert rep.reason.endswith("more than 1,000-fold is an exploding training")
    else:
        assert rep.ok, rep.reason
        assert next(c for c in rep.checks if c.name == "growth").passed is True


def test_an_exploding_loss_in_benchs_own_record_is_diverged_with_the_step_it_reached() -> None:
    """bench keeps the ladder from step 1 and every window loss; the window's loss i is at step steps - n + i + 1."""
    row = rows_for("k", [100.0])[0]
    row["metrics"].update(images=100.0, steps=8, iterations=5, loss_start=2.28, loss_at={"1": 2.28, "2": 5.0},
                          losses=[40.0, 900.0, 2.0e5, 3.1e7, 2.9e9])
    rep = Repeat.of(StoredRepeat.of(row))
    assert rep.status == "diverged"
    assert rep.reason == ("diverged: the loss grew 1.27e+09-fold, from 2.28 (training step 1) to 2.9e+09 (training "
                          "step 8); more than 1,000-fold is an exploding training")
    row["metrics"]["losses"] = [2.2, 2.1, 2.0, 1.9, 1.8]
    assert Repeat.of(StoredRepeat.of(row)).ok


def test_a_parsers_record_of_a_non_finite_loss_is_diverged_on_an_ok() -> None:
    """The launcher says diverged itself; a stored ok carrying the record (an older launcher, an import) is too."""
    rep = Repeat.of(StoredRepeat.of(program_row({"throughput": 50.0, "loss_end": 1.8,
                                                 "loss_seen": seen([2.3, math.nan, 1.9, 1.8], "mllog: tracked_stats loss")})))
    assert rep.status == "diverged"
    assert rep.reason == ("diverged: the loss became nan at the 2nd of the 4 losses read (mllog: tracked_stats "
                          "loss)")
    broken = program_row({"throughput": 50.0, "loss_seen": {"count": 3, "nonfinite": 1}})
    assert Repeat.of(StoredRepeat.of(broken)).status == "diverged"


@pytest.mark.parametrize(("row", "admitted", "words"), [
    ({"throughput": 1e-300, "window_s": 2.0, "images": 2e-300}, False,
     "less than one item measured: 1e-300 items/s over its 2 s window is 2e-300 items"),
    ({"throughput": 0.4, "window_s": 2.0, "images": 0.8}, False, "0.4 items/s over its 2 s window is 0.8 items"),
    ({"throughput": 0.5, "window_s": 2.0, "images": 1.0}, True, ""),
], ids=["1e-300", "0.8-items", "one-item"])
def test_a_figure_of_less_than_one_item_in_its_window_is_refused(row: dict[str, Any], admitted: bool,
                                                                 words: str) -> None:
    base = rows_for("k", [1.0])[0]
    base["metrics"] = row
    rep = Repeat.of(StoredRepeat.of(base))
    assert rep.ok is admitted and words in rep.reason, rep.reason
    if not admitted:
        assert rep.status == "refused"


def test_a_programs_figure_is_held_to_one_item_over_its_window_or_its_whole_run() -> None:
    """A program's own window when it says one; else the program's whole run, the longest its window can have been
    (a rate of 5 samples/s from a program that ran 0.05 s counted a quarter of a sample)."""
    unit = {"definitions": {"throughput": {"how": "pattern", "unit": "samples/s"}}}
    short = Repeat.of(StoredRepeat.of(program_row({"throughput": 5.0, **unit}, program_s=0.05)))
    assert short.status == "refused"
    assert short.reason == "less than one item measured: 5 samples/s over the program's whole 0.05 s window is 0.25 items"
    assert Repeat.of(StoredRepeat.of(program_row({"throughput": 5.0}, program_s=1.0))).ok
    own = Repeat.of(StoredRepeat.of(program_row({"throughput": 5.0, "window_s": 0.1}, program_s=60.0)))
    assert own.status == "refused" and "over its 0.1 s window is 0.5 items" in own.reason
    # A window a log's milliseconds wrote as 0: the program's run bounds it.
    assert Repeat.of(StoredRepeat.of(program_row({"throughput": 5.0, "window_s": 0.0}, program_s=2.0))).ok


def test_a_real_training_whose_loss_explodes_is_diverged_everywhere_admission_shows(tmp_path: Path) -> None:
    """The benchmark's own tiny training at a huge learning rate (AdamW at lr 1e4: its loss climbs from 2.28 to about
    2e30 in 5 steps, every value finite, the repeat stored ok) beside the same training at its usual rate: `matrix
    run` counts it diverged, `matrix show` says what grew by how much, the report's JSON lists it not admitted, and
    compare calls the pair a regression of outcome, never a speed."""
    import json

    from typer.testing import CliRunner

    from runner import cli

    m = tmp_path / "m.yaml"
    m.write_text("environments: [{name: cpu, backend: local, env: {OMP_NUM_THREADS: '1'}}]\n"
                 "axes: {model: [mlp], precision: [fp32], batch_size: [16], dataset: [synthetic], device: [cpu],\n"
                 "       optimizer: [adamw], lr: [0.0006, 10000.0], threads: [1]}\n"
                 "run: {iterations: 5, warmup: 0, repeats: 1}\n")
    db = tmp_path / "r.db"
    run = CliRunner().invoke(cli.app, ["run", "-m", str(m), "--db", str(db)], terminal_width=250)
    assert run.exit_code == 3, run.output  # not everything measured counts
    assert "1 diverged" in run.output and "the loss grew" in run.output
    stored = {r["params"]["lr"]: r for r in (s.columns() for s in _rows(db))}
    assert stored[10000.0]["status"] == "ok" and stored[0.0006]["status"] == "ok"  # the benchmark said ok
    losses = stored[10000.0]["metrics"]["losses"]
    assert all(math.isfinite(v) for v in losses) and losses[-1] > 1e20 * losses[0]
    show = CliRunner().invoke(cli.app, ["show", "--db", str(db)], terminal_width=250)
    assert show.exit_code == 0, show.output
    line = next(ln for ln in show.output.splitlines() if "diverged" in ln)
    assert "the loss grew" in line and "-fold" in line
    out = tmp_path / "report"
    report = CliRunner().invoke(cli.app, ["report", "--db", str(db), "--format", "json", "--out", str(out)])
    assert report.exit_code == 0, report.output
    (bad,) = json.loads((out / "report.json").read_text())["not_admitted"]
    assert bad["status"] == "diverged" and bad["stored_status"] == "ok"
    assert bad["admission"].startswith("diverged: the loss grew ") and "(training step 1) to " in bad["admission"]
    assert bad["admission"].endswith("(training step 5); more than 1,000-fold is an exploding training")


def _rows(db: Path) -> list[StoredRepeat]:
    from runner.store import Store

    with Store(db, readonly=True) as store:
        return list(store.rows())


@pytest.mark.parametrize(("record", "status"), [
    ({"count": math.inf, "nonfinite": 1, "first_nonfinite_at": math.nan, "first_nonfinite": "nan"}, "diverged"),
    ({"count": "x", "nonfinite": 2}, "diverged"),
    ({"first": 1.0, "largest": 1e9, "largest_at": -3, "first_at": 1e300}, "diverged"),
    ({"first": "2.3", "largest": None, "nonfinite": None}, "ok"),
    ({"nonfinite": 0, "first": 2.3, "largest": 2.3}, "ok"),
    ("not a record", "ok"),
], ids=["inf-count", "text-count", "odd-places", "text-values", "healthy", "not-a-mapping"])
def test_a_loss_record_read_from_a_file_is_judged_without_a_crash(record: Any, status: str) -> None:
    """An imported file's `metrics.loss_seen` may hold anything: admission judges what it can, in one line."""
    rep = Repeat.of(StoredRepeat.of(program_row({"throughput": 50.0, "loss_seen": record})))
    assert rep.status == status, rep.reason
    assert "\n" not in rep.reason
