"""Resuming from a pack: what the kit counts as left is what admission did not admit, and the hand-written loop runs
the count of an admitted window (the first H100 run: two plain repeats diverged under fused SGD, two refused for
0.32-s windows, and the store's calibration kept the 5 iterations of a mis-calibrated warm-up)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import matrix
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.kit import evidence, evidence_page, headline, reference
from runner.kit.settings import KitCell, options
from runner.store import Store


def kit_at(tmp_path: Path) -> evidence.Kit:
    k = evidence.Kit(options(["--dry-run", "--repeats", "3", "--state", str(tmp_path / "s"), "--out",
                                  str(tmp_path / "r")]))
    k.write_matrices()
    return k


def result(iterations: int, window_s: float, asked: float = 0.055, finite: bool = True,
           calibrating: bool = False, optimizer: str = "sgd-momentum-0.9-foreach") -> Outcome:
    """A bench answer of `iterations` in `window_s` seconds, `asked` promised; calibrating: the repeat chose its count."""
    throughput = 4.0 * iterations / window_s
    metrics: dict[str, Any] = {"throughput": throughput, "images": 4.0 * iterations, "window_s": window_s,
                               "iterations": iterations, "window_asked_s": asked, "warmup": {"iterations": 7},
                               "finite": {"all": finite, **({} if finite else {"first_nonfinite_step": 5})}}
    if calibrating:
        metrics["calibration"] = {"iterations": iterations, "iter_s": window_s / iterations}
    return Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": metrics,
                               "precision": {"optimizer": optimizer}}, "", "", 1.0, 2.0)


def store_rows(k: evidence.Kit, c: KitCell, answers: list[Outcome], run: str = "first") -> None:
    assert c.path is not None
    cell = matrix.load(c.path).cells()[0]
    with Store(k.db) as store:
        store.start_run(run, None, "auto", [])
        for r, answer in enumerate(answers):
            store.add(run, Task(cell, r), answer)
        store.finish_run(run, "complete")


def test_a_repeat_admission_sets_aside_is_left_to_run(tmp_path: Path) -> None:
    """missing() counted only None/cancelled/not_started as left: a stored ok that diverged or whose window was
    shorter than asked (refused) was never measured again."""
    k = kit_at(tmp_path)
    plain = next(c for c in k.cells if c.phase.name == "headline")
    store_rows(k, plain, [result(5, 0.01, calibrating=True), result(5, 0.06, finite=False), result(9, 0.06)])
    assert k.stored()[(plain.key, 0)] == "refused" and k.stored()[(plain.key, 1)] == "diverged"
    left = [r for c, r in k.missing(["headline"]) if c is plain]
    assert left == [0, 1], left  # repeat 2 is admitted: measured
    assert evidence.to_run("failed") and evidence.to_run("cancelled") and evidence.to_run(None)
    assert not evidence.to_run("ok") and not evidence.to_run("unsupported") and not evidence.to_run("skipped")


def test_the_kit_asks_matrix_run_to_measure_set_aside_repeats_again(tmp_path: Path, monkeypatch: Any) -> None:
    """The kit's `matrix run` measured only what a plain run does: a set-aside repeat it counts as left would never
    be run; and one tried in this call and set aside again is not run a second time by a later repeat's call."""
    k = kit_at(tmp_path)
    plain = next(c for c in k.cells if c.phase.name == "headline")
    store_rows(k, plain, [result(5, 0.01, calibrating=True), result(9, 0.06)])
    argvs: list[list[str]] = []

    def app(argv: list[str], **kw: Any) -> int:
        argvs.append(list(argv))
        return 0
    monkeypatch.setattr("runner.cli.app", app)
    assert k.catch_up(plain, 1)
    assert len(argvs) == 1 and "--rerun-failed" in argvs[0]  # repeat 0 once: still refused, then the cell waits


def test_the_hand_written_loop_runs_the_newest_admitted_windows_count(tmp_path: Path) -> None:
    """sizes() passed the store's calibration (the first ok repeat's count, kept however short its window) as
    --iterations: the first H100 run's 5 iterations, 0.27-s windows, for the '÷ hand-written loop' ratio."""
    k = kit_at(tmp_path)
    plain = next(c for c in k.cells if c.phase.name == "headline")
    store_rows(k, plain, [result(5, 0.01, calibrating=True)])
    with Store(k.db, readonly=True) as store:
        assert store.calibrations([plain.key]) == {plain.key: 5}
    assert reference.sizes(k, plain) is None  # no admitted repeat: the loop waits
    store_rows(k, plain, [result(5, 0.01), result(12, 0.06), result(14, 0.07)], "second")  # repeats re-sized by bench
    assert reference.sizes(k, plain) == (14, 7)


def test_the_headline_says_what_auto_ran() -> None:
    """The plain row's key has no optimizer_impl; its first repeats ran fused SGD (diverged), and auto picks foreach
    under a GradScaler since: the page says which optimizer each row that leaves it to auto ran."""
    from runner.kit.cell_results import CellResult
    from tests.kit.test_kit import typed

    phase = evidence.plans.Phase("headline", "", (), 3)
    cell = KitCell(phase, {"precision": "amp", "batch_size": 4}, {}, "x")
    rows = typed([{"status": "ok", "repeat": 0, "metrics": {"throughput": 5.0},
                   "env": {"precision_flags": {"optimizer": "sgd-momentum-0.9-fused"}}},
                  {"status": "diverged", "repeat": 1, "env": {"precision_flags": {"optimizer": "sgd-momentum-0.9-fused"}}},
                  {"status": "ok", "repeat": 2, "metrics": {"throughput": 5.0},
                   "env": {"precision_flags": {"optimizer": "sgd-momentum-0.9-foreach"}}}])
    said = headline.auto_ran(CellResult(cell, rows))
    assert said.startswith("optimizer_impl auto ran different optimizers in its repeats: sgd-momentum-0.9-fused")
    assert "sgd-momentum-0.9-foreach (1 ok)" in said
    named = KitCell(phase, {"precision": "amp", "optimizer_impl": "fused"}, {}, "y")
    assert headline.auto_ran(CellResult(named, rows)) == ""
    assert evidence_page  # the page module imports headline (its section)
