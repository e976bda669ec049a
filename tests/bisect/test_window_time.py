"""`matrix bisect --metric time` judges a window's length only against windows of as many iterations, as compare,
the history and check do: with `iterations: auto` each window is as long as its target, so e2, twice as fast as e1,
ran 66 iterations in the ~1.1 s e1 took for 33, and bisect named "e1 -> e2: 1.10x slower" a culprit."""

from __future__ import annotations

from pathlib import Path

from runner import matrix
from runner.analysis.bisect_pair import Settings, compare
from runner.analysis.verdict import Verdict
from runner.bisect.store_measure import StoreMeasure
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.record.metrics import METRICS
from runner.store import Store

MATRIX = """name: bis
environments:
  - {name: e1, backend: local}
  - {name: e2, backend: local}
axes: {model: [mnist_cnn], precision: [fp32], batch_size: [32], device: [cpu]}
run: {iterations: 3, warmup: 1, repeats: 5}
"""
ENV = {"torch": "2.6.0", "python": "3.11.2", "cpu": "AMD EPYC", "device": "cpu"}


def filled(tmp: Path, windows: dict[str, tuple[int, float]]) -> tuple[list[object], Store]:
    """Five ok repeats of each environment's one cell: `windows[env]` = (iterations in the window, its seconds)."""
    path = tmp / "m.yaml"
    path.write_text(MATRIX)
    cells = matrix.load(path).cells()
    store = Store(tmp / "s.db")
    store.start_run("fill", str(path), "bis", [])
    for cell in cells:
        iters, seconds = windows[cell.env_name]
        for r in range(5):
            w = seconds * (1 + 0.01 * (r % 3 - 1))
            metrics = {"throughput": 32 * iters / w, "window_s": w, "images": 32.0 * iters, "iterations": iters,
                       "steps": iters + 1}
            store.add("fill", Task(cell, r), Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": metrics,
                                                                 "env": ENV}, "", "", 1.0 + r, 2.0 + r))
    store.finish_run("fill", "complete")
    return list(cells), store


def judged(tmp: Path, windows: dict[str, tuple[int, float]], metric: str) -> tuple[Verdict, str]:
    cells, store = filled(tmp, windows)
    with store:
        measure = StoreMeasure(None, cells, store, METRICS[metric], workdir=tmp)  # type: ignore[arg-type]
        a, b = measure.sample(0, 5), measure.sample(1, 5)
    c = compare(0, 1, a, b, Settings(metric=metric), last_level=True)
    return c.verdict, c.why


def test_a_calibrated_window_is_not_judged_against_one_of_other_iterations(tmp_path: Path) -> None:
    verdict, why = judged(tmp_path, {"e1": (33, 1.0), "e2": (66, 1.1)}, "window_s")
    assert verdict is Verdict.UNDECIDED
    assert why.startswith("not comparable: the time is the length of windows of different numbers of iterations "
                          "(33 vs 66"), why


def test_windows_of_as_many_iterations_are_judged_by_their_length(tmp_path: Path) -> None:
    verdict, why = judged(tmp_path, {"e1": (33, 1.0), "e2": (33, 1.5)}, "window_s")
    assert verdict is Verdict.FAIL, why  # half again as long for the same work: a change the bisect names
