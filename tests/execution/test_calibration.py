"""`iterations: auto`: a cell's first repeat calibrates the window, the store keeps the count, and every later
repeat, a resume and another run sharing the store run the same count.

Backends are faked at their one boundary (`run_one` / `run`): they record the benchmark arguments each task got
and answer as bench would (a calibrating repeat says the count it chose). The real benchmark's calibration is in
tests/bench/test_timing.py and tests/execution/test_local_run.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from runner import matrix as matrix_mod
from runner.backends.base import Backend, SequentialBackend
from runner.backends.local import LocalEnvironment
from runner.backends.slurm import SlurmEnvironment
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.store import Store

AUTO = """
name: auto
environments: [{name: here, backend: %s}]
axes: {model: [mlp], precision: [fp32, bf16], batch_size: [8], device: [cpu]}
run: {iterations: {min_time: 1s, min: 2, max: 500}, warmup: auto, repeats: %d}
"""


def bench_answer(args: Sequence[str], chooses: int, status: Status = Status.OK) -> Outcome:
    """What bench answers to these arguments: a repeat without --iterations calibrates and says so."""
    given = list(args)
    metrics: dict[str, Any] = {"throughput": 100.0}
    if "--iterations" in given:
        metrics["iterations"] = int(given[given.index("--iterations") + 1])
    else:
        metrics["iterations"] = chooses
        metrics["calibration"] = {"iterations": chooses, "iter_s": 0.01}
    return Outcome(status, {"schema": 1, "status": status.value, "metrics": metrics}, "", "", 1.0, 2.0)


class Recorder:
    """Shared by the fake backends: each task's arguments, in the order they ran; what calibration answers."""

    def __init__(self, chooses: int = 37) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.chooses = chooses
        self.fail_first: set[str] = set()  # cell keys whose first repeat fails

    def answer(self, task: Task) -> Outcome:
        args = task.bench_args()
        self.calls.append((task.id, args))
        if task.cell.key in self.fail_first:
            self.fail_first.discard(task.cell.key)
            return bench_answer(args, self.chooses, Status.FAILED)
        return bench_answer(args, self.chooses)


def fake_local(rec: Recorder) -> type[Backend]:
    class Here(SequentialBackend):
        kind = "local"
        config = LocalEnvironment

        def run_one(self, task: Task) -> Outcome:
            return rec.answer(task)

    return Here


def fake_queue(rec: Recorder, submissions: list[list[str]]) -> type[Backend]:
    class Queue(Backend):
        kind = "slurm"
        config = SlurmEnvironment
        queued = True
        submitted: ClassVar[set[str]] = set()

        def elsewhere(self) -> bool:
            return True

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            fresh = [t for t in tasks if t.id not in self.submitted]
            if fresh:
                submissions.append([t.id for t in fresh])
                self.submitted.update(t.id for t in fresh)
            if not self.ctx.wait:
                return
            for t in tasks:
                sink(t, rec.answer(t))

    return Queue


def iterations_of(args: list[str]) -> int | None:
    return int(args[args.index("--iterations") + 1]) if "--iterations" in args else None


def run(m: matrix_mod.Matrix, store: Store, tmp_path: Path, **kw: Any) -> execute.RunReport:
    return execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True), **kw)


def test_first_repeat_calibrates_later_repeats_and_a_resume_reuse_the_stored_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(chooses=37)
    monkeypatch.setattr(execute.backends, "get", lambda kind: fake_local(rec))
    m = matrix_mod.parse(AUTO % ("local", 3), tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        assert run(m, store, tmp_path).exit_code == 0
        by_cell: dict[str, list[int | None]] = {}
        for task_id, args in rec.calls:
            by_cell.setdefault(task_id.rsplit("-r", 1)[0], []).append(iterations_of(args))
            assert "--window-time" in args and "--warmup-max" in args  # the definition travels with every repeat
        assert by_cell == {c.key: [None, 37, 37] for c in m.cells()}
        # Both cells' calibrating repeats run before any other repeat.
        assert [iterations_of(a) for _, a in rec.calls[:2]] == [None, None]
        assert store.calibrations(c.key for c in m.cells()) == {c.key: 37 for c in m.cells()}
        # A resume with more repeats (and a benchmark that would now choose another count) runs the stored one.
        rec.calls.clear()
        rec.chooses = 99
        more = matrix_mod.parse(AUTO % ("local", 5), tmp_path / "m.yaml")
        assert [c.key for c in more.cells()] == [c.key for c in m.cells()]  # repeats are not in the key
        assert run(more, store, tmp_path).exit_code == 0
        assert sorted(iterations_of(a) for _, a in rec.calls) == [37] * 4
        stored = [r.metrics["iterations"] for r in store.rows()]
        assert stored == [37] * 10


def test_a_failed_calibrating_repeat_lets_the_next_repeat_calibrate(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(chooses=12)
    monkeypatch.setattr(execute.backends, "get", lambda kind: fake_local(rec))
    m = matrix_mod.parse(AUTO % ("local", 3), tmp_path / "m.yaml")
    first = m.cells()[0]
    rec.fail_first.add(first.key)
    with Store(tmp_path / "r.db") as store:
        report = run(m, store, tmp_path)
        mine = [iterations_of(a) for t, a in rec.calls if t.startswith(first.key)]
        assert mine == [None, None, 12]  # the failed one chose nothing; the next calibrated, the last reused it
        assert store.calibrations([first.key]) == {first.key: 12}
        assert report.exit_code == execute.EXIT_NOT_MEASURED


def test_a_batch_scheduler_gets_the_calibrating_repeats_first_and_the_rest_with_the_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder(chooses=21)
    submissions: list[list[str]] = []
    monkeypatch.setattr(execute.backends, "get", lambda kind: fake_queue(rec, submissions))
    m = matrix_mod.parse(AUTO % ("slurm", 3), tmp_path / "m.yaml")
    keys = [c.key for c in m.cells()]
    with Store(tmp_path / "r.db") as store:
        assert run(m, store, tmp_path).exit_code == 0
    assert submissions == [[f"{k}-r0" for k in keys], [f"{k}-r{r}" for k in keys for r in (1, 2)]]
    assert [iterations_of(a) for _, a in rec.calls] == [None, None] + [21] * 4


def test_without_waiting_the_other_repeats_wait_for_the_calibration(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    submissions: list[list[str]] = []
    monkeypatch.setattr(execute.backends, "get", lambda kind: fake_queue(rec, submissions))
    m = matrix_mod.parse(AUTO % ("slurm", 3), tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        report = run(m, store, tmp_path, wait=False)
    assert len(submissions) == 1 and all(t.endswith("-r0") for t in submissions[0])
    assert report.deferred == 4 and report.pending == 2


def other_run(store: Store, run_id: str) -> None:
    """A live run of another process on another host, as that process writes it (tests/store/test_claims.py)."""
    now = time.time()
    store.db.execute("INSERT INTO runs (run_id, schema, started_at, host, status) VALUES (?, 1, ?, 'elsewhere', "
                     "'running')", (run_id, now))
    store.db.execute("INSERT INTO holders (run_id, schema, host, ident, pid, started_at, heartbeat) VALUES "
                     "(?, 1, 'elsewhere', 'other-kernel', 4242, ?, ?)", (run_id, now, now))


def test_another_run_calibrating_a_cell_holds_its_other_repeats_until_the_count_is_stored(tmp_path: Path) -> None:
    m = matrix_mod.parse(AUTO % ("local", 3), tmp_path / "m.yaml")
    cell = m.cells()[0]
    t0, t1 = Task(cell, 0), Task(cell, 1)
    needs = execute.Want().needs
    with Store(tmp_path / "r.db") as store:
        other_run(store, "other")
        assert store.claim("other", [t0], needs)[t0.id].mine  # the other run calibrates repeat 1
        store.start_run("mine", None, "auto", [])
        answer = store.claim("mine", [t1], needs)[t1.id]
        assert not answer.mine and answer.holder is not None and answer.holder.run_id == "other"
        # Its result stores the count; now repeat 2 is free, and runs with that count.
        assert store.record("other", t0, bench_answer([], 44), needs)
        assert store.claim("mine", [t1], needs)[t1.id].mine
        assert store.calibrations([cell.key]) == {cell.key: 44}
        # A fixed-count cell never waits for a calibration.
        fixed = matrix_mod.parse((AUTO % ("local", 3)).replace("{min_time: 1s, min: 2, max: 500}", "20"))
        f0, f1 = Task(fixed.cells()[0], 0), Task(fixed.cells()[0], 1)
        assert store.claim("other", [f0], needs)[f0.id].mine and store.claim("mine", [f1], needs)[f1.id].mine
        store.finish_run("mine", "complete")


def test_the_first_calibration_stays(tmp_path: Path) -> None:
    m = matrix_mod.parse(AUTO % ("local", 3), tmp_path / "m.yaml")
    cell = m.cells()[0]
    with Store(tmp_path / "r.db") as store:
        store.start_run("one", None, "auto", [])
        store.record("one", Task(cell, 0), bench_answer([], 0, Status.OK))   # a count of 0 is no calibration
        assert store.calibrations([cell.key]) == {}
        store.record("one", Task(cell, 1), bench_answer([], 30, Status.FAILED))  # nor is a failed repeat's
        assert store.calibrations([cell.key]) == {}
        store.record("one", Task(cell, 2), bench_answer([], 30))
        store.record("one", Task(cell, 3), bench_answer([], 31))  # another run's race: the first stays
        assert store.calibrations([cell.key]) == {cell.key: 30}
        store.finish_run("one", "complete")
    with Store(tmp_path / "r.db", readonly=True) as store:  # a reader sees it too
        assert store.calibrations([cell.key]) == {cell.key: 30}
        row = store.db.execute("SELECT metrics FROM results WHERE repeat=2").fetchone()
        assert json.loads(row[0])["calibration"]["iterations"] == 30


@pytest.mark.parametrize(("warmup", "note"), [
    ({"steady": False, "how": "max_time", "iterations": 1},
     "warm-up not steady: stopped at its time ceiling after 1 iteration"),
    ({"steady": False, "how": "max", "iterations": 30}, "warm-up not steady: stopped at its ceiling after 30 iterations"),
    ({"steady": True, "how": "steady", "iterations": 6}, ""),
])
def test_show_notes_a_warm_up_that_stopped_at_a_ceiling(warmup: dict[str, Any], note: str) -> None:
    from runner.analysis import Repeat, StoredRepeat
    from runner.commands.show import note as _show_note
    row = {"status": "ok", "reason": None, "metrics": {"throughput": 100.0, "window_s": 1.0, "warmup": warmup}}
    assert _show_note(Repeat.of(StoredRepeat.of(row))).text == note
