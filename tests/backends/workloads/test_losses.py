"""Every loss a user's program reports is judged, whichever parser reads it: a NaN, an infinity or a minus infinity at
any step (finite after it or not) makes the repeat `diverged`, a loss that grows by orders of magnitude over the run
(a real training at a huge learning rate) is `diverged` at admission, a healthy one is admitted. Each parser
(mllog through the real mlperf-logging, DLLogger's stream, a pattern, matrix_bench.measure) runs a real program
through the launcher; admission reads what the launcher would store (docs/admission.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.backends import artifact
from runner.bench import parsers
from runner.bench.contract import EXIT_DIVERGED
from runner.bench.workload import STATUS_EXIT
from runner.record.stored import StoredRepeat
from tests.backends.workloads.test_repeat_output import config, repeat

SCRIPT = Path(__file__).with_name("scripts") / "losses.py"
PARSERS = {
    "mllog": {"kind": "mllog", "skip": 0},
    "dllogger": {"kind": "dllogger"},
    "pattern": {"kind": "pattern", "figures": {
        "loss": {"regex": r"loss (\S+),"},
        "throughput": {"regex": r"throughput (\S+) samples/s", "unit": "samples/s", "reduce": "mean"}}},
    "measure": {"kind": "matrix"},
}


@pytest.fixture(autouse=True)
def zipapp_on_path(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """`from matrix_bench import measure` as the program finds it in an environment: the benchmark's zipapp on its
    PYTHONPATH (the launcher puts it there when it runs from the zipapp; here it runs from the checkout)."""
    if "mlperf_logging" not in sys.modules:
        pytest.importorskip("mlperf_logging.mllog")
    monkeypatch.setenv("PYTHONPATH", str(artifact.install(tmp_path_factory.mktemp("zipapp"))))


def run(fmt: str, *args: str) -> tuple[dict[str, Any], Any]:
    """One repeat of the program through the launcher, and admission of the result it would store."""
    result = repeat([sys.executable, str(SCRIPT), fmt, *args], config(PARSERS[fmt]))
    stored = StoredRepeat.of({"status": result["status"], "reason": result["reason"], "metrics": result["metrics"],
                              "raw": result})
    return result, stored.admission


@pytest.mark.parametrize("fmt", list(PARSERS))
@pytest.mark.parametrize(("value", "word"), [("nan", "nan"), ("inf", "inf"), ("-inf", "-inf")])
def test_a_non_finite_loss_at_step_2_of_4_is_diverged_though_finite_after(fmt: str, value: str, word: str) -> None:
    """The issue's MLPerf log (a NaN loss at step 2 of 4, finite after: its final loss looks healthy), in every
    format: diverged by the launcher (exit 5), and by admission from the record of every loss read."""
    result, admission = run(fmt, "--losses", f"2.3,{value},1.9,1.8")
    assert result["status"] == "diverged", result["reason"]
    assert STATUS_EXIT["diverged"] == EXIT_DIVERGED == 5
    assert f"loss became {word} at the 2nd of the " in result["reason"], result["reason"]
    seen = result["metrics"]["loss_seen"]
    assert seen["nonfinite"] == 1 and seen["first_nonfinite_at"] == 2 and seen["first_nonfinite"] == word
    assert admission.status == "diverged"
    assert f"diverged: the loss became {word} at the 2nd of the" in admission.reasons
    # The same result stored `ok` (an older launcher, a file imported, a row edited) is diverged all the same.
    as_ok = StoredRepeat.of({"status": "ok", "metrics": result["metrics"], "raw": result}).admission
    assert as_ok.status == "diverged" and as_ok.reasons == admission.reasons


@pytest.mark.parametrize("fmt", list(PARSERS))
def test_a_real_training_at_a_huge_learning_rate_explodes_finite_and_is_diverged(fmt: str) -> None:
    """SGD at lr 100 on a tiny MLP: the loss climbs from 2.35 to about 4e19 in 8 steps, every value finite. The
    program ends well and says ok; admission makes it diverged and says what grew by how much."""
    result, admission = run(fmt, "--train", "100", "--steps", "8")
    assert result["status"] == "ok", result["reason"]
    seen = result["metrics"]["loss_seen"]
    assert seen["nonfinite"] == 0 and seen["first"] == pytest.approx(2.352, abs=1e-3) and seen["largest"] > 1e18
    assert admission.status == "diverged"
    assert admission.reasons.startswith("diverged: the loss grew "), admission.reasons
    assert "-fold, from 2.352 (the 1st of the " in admission.reasons
    assert "more than 1,000-fold is an exploding training" in admission.reasons


@pytest.mark.parametrize("fmt", list(PARSERS))
def test_a_healthy_training_is_admitted(fmt: str) -> None:
    result, admission = run(fmt, "--train", "0.1", "--steps", "8")
    assert result["status"] == "ok", result["reason"]
    assert admission.status == "ok", admission.reasons
    growth = next(c for c in admission.checks if c.name == "growth")
    assert growth.passed is True


def test_a_real_training_that_goes_nan_is_diverged() -> None:
    """At lr 1e5 the same training reaches 1e34 and then NaN at its 6th step."""
    result, admission = run("pattern", "--train", "1e5", "--steps", "8")
    assert result["status"] == "diverged" and "loss became nan at the 6th of the 8 losses" in result["reason"]
    assert admission.status == "diverged"


def test_a_program_that_stops_on_its_nan_loss_is_diverged_not_failed() -> None:
    """Many training scripts raise on a NaN loss: the repeat is what the loss says, with the exit status beside it."""
    script = "print('step 0: loss 2.3, throughput 100 samples/s'); print('step 1: loss nan,'); raise SystemExit(3)"
    result = repeat([sys.executable, "-c", script], config(PARSERS["pattern"]))
    assert result["status"] == "diverged"
    assert result["reason"].endswith("the program then exited with status 3")


def test_a_parser_that_keeps_no_loss_of_its_own_is_judged_on_its_final_one() -> None:
    """A parser of a new kind that gives loss_end without handing its losses to `loss()` (the plug-in keyvalue of
    tests/backends/workloads/plugins does hand them): its final loss is recorded all the same."""

    class Final(parsers.Parser):
        kind = "final_only"

        def measured(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], None]:
            return {"throughput": 10.0, "loss_end": float("inf")}, {}, {}, None

    found = Final({"kind": "final_only"}).outcome()
    assert found["problem"] is None
    assert found["losses"]["nonfinite"] == 1 and found["losses"]["from"] == "final_only: the final loss"


def test_a_non_loss_figure_that_is_not_finite_still_fails_the_repeat() -> None:
    """Only losses are divergence: a NaN throughput or a figure of the user's own naming is a broken figure."""
    cfg = config({"kind": "pattern", "figures": {
        "throughput": {"regex": r"throughput (\S+) samples/s", "unit": "samples/s"},
        "perplexity": {"regex": r"ppl (\S+)", "better": "lower"}}})
    parser = parsers.make(cfg)
    for line in ("throughput 100 samples/s", "ppl nan"):
        parser.feed(line)
    found = parser.outcome()
    assert found["problem"] and "perplexity" in found["problem"] and found["losses"] is None


@pytest.mark.parametrize("fmt", ["mllog", "dllogger", "measure"])
def test_a_loss_a_strict_encoder_wrote_as_null_is_diverged_not_skipped(fmt: str) -> None:
    """orjson (and json with allow_nan off) writes a NaN as null: a null where a loss is expected is a loss that was
    not finite, not 'no loss this step'. Skipping it admitted the run on its last finite loss (1.8)."""
    result, admission = run(fmt, "--losses", "2.3,nan,1.9,1.8", "--strict")
    assert result["status"] == "diverged", result["reason"]
    assert "loss became null (NaN or infinite, as strict JSON writes it) at the 2nd of the " in result["reason"], \
        result["reason"]
    seen = result["metrics"]["loss_seen"]
    assert seen["nonfinite"] == 1 and seen["first_nonfinite_at"] == 2 and seen["first_nonfinite"] == "null"
    assert seen["count"] == (5 if fmt == "dllogger" else 4) and seen["finite_before"] == 2.3  # dllogger: + summary
    assert admission.status == "diverged" and "diverged: the loss became null" in admission.reasons
    as_ok = StoredRepeat.of({"status": "ok", "metrics": result["metrics"], "raw": result}).admission
    assert as_ok.status == "diverged"


def test_a_final_loss_a_strict_encoder_wrote_as_null_is_diverged() -> None:
    """The last step's loss null: the run's final loss is not finite, whatever came before."""
    result, admission = run("mllog", "--losses", "2.3,2.1,1.9,nan", "--strict")
    assert result["status"] == "diverged" and "at the 4th of the 4 losses" in result["reason"], result["reason"]
    assert admission.status == "diverged"


def test_dllogger_judges_the_summary_loss_under_another_key_than_the_steps() -> None:
    """Per-step losses under `loss`, the summary's under `train.loss` and NaN: keep_losses read only the per-step key,
    so the summary's NaN was never judged and the repeat ended `failed` ("loss_end is nan") instead of diverged."""
    result, admission = run("dllogger", "--losses", "2.3,2.1,1.9,1.8", "--step-key", "loss", "--summary-loss", "nan")
    assert result["status"] == "diverged", result["reason"]
    assert "loss became nan at the 5th of the 5 losses read" in result["reason"], result["reason"]
    assert "train.loss" in result["metrics"]["loss_seen"]["from"], result["metrics"]["loss_seen"]
    assert admission.status == "diverged"


def test_dllogger_judges_every_per_step_loss_key() -> None:
    """Two loss keys logged per step (`loss` and `train.loss`): a NaN under either is a training that diverged."""
    cfg = config(PARSERS["dllogger"])
    parser = parsers.make(cfg)
    for step, (a, b) in enumerate([(2.3, 2.3), (float("nan"), 2.1), (1.9, 1.9)]):
        parser.feed("DLLL " + json.dumps({"type": "LOG", "step": [step], "data": {"loss": a, "train.loss": b,
                                                                                   "train.ips": 100.0}}))
    found = parser.outcome()
    assert found["losses"]["nonfinite"] == 1 and found["losses"]["first_nonfinite"] == "nan", found["losses"]


def test_a_null_that_is_not_a_loss_is_still_no_value() -> None:
    """Only a loss key's null is a non-finite loss: a per-step throughput or accuracy logged as null is no value, as
    before (the summary's figure is read)."""
    parser = parsers.make(config(PARSERS["dllogger"]))
    for step in range(3):
        parser.feed("DLLL " + json.dumps({"type": "LOG", "step": [step], "data": {"train.loss": 2.0 - step / 10,
                                                                                   "train.ips": None}}))
    parser.feed("DLLL " + json.dumps({"type": "LOG", "step": [], "data": {"train.total_ips": 100.0}}))
    found = parser.outcome()
    assert found["problem"] is None and found["metrics"]["throughput"] == 100.0
    assert found["losses"]["nonfinite"] == 0 and found["losses"]["count"] == 3
