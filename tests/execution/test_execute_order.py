"""The order `matrix run` drives environments in: batch-scheduled ones are submitted first.

Fake backends record what was asked of them; the real Slurm path is tested in tests/backends/slurm.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console

from runner import matrix as matrix_mod
from runner.backends.base import Backend
from runner.backends.local import LocalEnvironment
from runner.backends.slurm import SlurmEnvironment
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.store import Store

MATRIX = """
name: order
environments:
  - {name: cluster-a, backend: slurm}
  - {name: here, backend: local}
  - {name: cluster-b, backend: slurm}
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 2}
"""


def fakes(events: list[tuple[str, str]], *, elsewhere: bool) -> dict[str, type[Backend]]:
    def done(task: Task) -> Outcome:
        return Outcome(Status.OK, {"status": "ok", "metrics": {"throughput": 1.0}}, "", "", 0.0, 1.0)

    class Queue(Backend):
        kind = "slurm"
        config = SlurmEnvironment
        queued = True
        submitted: ClassVar[dict[str, Task]] = {}

        def elsewhere(self) -> bool:
            return elsewhere

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            fresh = [t for t in tasks if t.id not in self.submitted]
            if fresh:
                events.append(("submit", self.env.name))
                self.submitted.update({t.id: t for t in fresh})
            if not self.ctx.wait:
                return
            events.append(("wait", self.env.name))
            for t in tasks:
                sink(t, done(t))

    class Here(Backend):
        kind = "local"
        config = LocalEnvironment

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            events.append(("run", self.env.name))
            for t in tasks:
                sink(t, done(t))

    return {"slurm": Queue, "local": Here}


@pytest.mark.parametrize(("elsewhere", "expected"), [
    # Jobs run on other machines: work here overlaps them, the jobs are collected last.
    (True, [("submit", "cluster-a"), ("submit", "cluster-b"), ("run", "here"),
            ("wait", "cluster-a"), ("wait", "cluster-b")]),
    # This host may be one of the nodes: wait for the jobs before measuring here.
    (False, [("submit", "cluster-a"), ("submit", "cluster-b"), ("wait", "cluster-a"),
             ("wait", "cluster-b"), ("run", "here")]),
])
def test_batch_environments_are_all_submitted_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    elsewhere: bool, expected: list[tuple[str, str]]) -> None:
    events: list[tuple[str, str]] = []
    registry = fakes(events, elsewhere=elsewhere)
    monkeypatch.setattr(execute.backends, "get", lambda kind: registry[kind])
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        statuses = [r.status for r in store.rows()]
    assert events == expected
    assert report.pending == 0 and statuses == ["ok"] * 6


def test_no_wait_and_a_lone_batch_environment_keep_the_plain_order(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str]] = []
    registry = fakes(events, elsewhere=True)
    monkeypatch.setattr(execute.backends, "get", lambda kind: registry[kind])
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    cells = matrix_mod.select(m.cells(), ["cluster-a"], ())
    with Store(tmp_path / "r.db") as store:
        execute.run_matrix(m, cells, store, workdir=tmp_path, console=Console(quiet=True))
    assert events == [("submit", "cluster-a"), ("wait", "cluster-a")]
    events.clear()
    registry.update(fakes(events, elsewhere=True))
    with Store(tmp_path / "r2.db") as store:  # --no-wait: submit and move on, in the matrix's order
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, wait=False, console=Console(quiet=True))
    assert events == [("submit", "cluster-a"), ("run", "here"), ("submit", "cluster-b")]
    assert report.pending == 4


def test_an_environment_that_fails_every_repeat_alike_is_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    class Broken(Backend):
        kind = "local"
        config = LocalEnvironment

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            for i, t in enumerate(tasks):
                reason = "image 'x' is not on this engine" if i < len(tasks) - 1 else "something else"
                sink(t, Outcome(Status.FAILED, None, "", reason, 0.0, 1.0))

    monkeypatch.setattr(execute.backends, "get", lambda kind: Broken)
    m = matrix_mod.parse(MATRIX.replace("backend: slurm", "backend: local"), tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        assert len(list(store.rows())) == 6, "every repeat is stored, said or not"
    err = capsys.readouterr().err
    # Per environment of two repeats: the first said in full, the second differs and is said too.
    assert err.count("is not on this engine") == 3 and err.count("something else") == 3
    assert "more repeat" not in err
    monkeypatch.setattr(execute.backends, "get", lambda kind: type("Same", (Broken,), {
        "run": lambda self, tasks, sink: [sink(t, Outcome(Status.FAILED, None, "", "no engine", 0.0, 1.0))
                                          for t in tasks]}))
    m = matrix_mod.parse(MATRIX.replace("backend: slurm", "backend: local").replace("repeats: 2", "repeats: 5"),
                         tmp_path / "m.yaml")
    with Store(tmp_path / "r2.db") as store:
        execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
    err = capsys.readouterr().err
    assert err.count("no engine") == 3, err  # once per environment
    assert err.count("4 more repeats of") == 3


def test_ctrl_c_while_the_others_run_says_the_submitted_jobs_keep_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    events: list[tuple[str, str]] = []
    registry = fakes(events, elsewhere=True)

    class Interrupted(registry["local"]):  # type: ignore[valid-type, misc]
        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            raise KeyboardInterrupt

    registry["local"] = Interrupted
    monkeypatch.setattr(execute.backends, "get", lambda kind: registry[kind])
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        assert list(store.rows()) == []
    assert report.interrupted and events == [("submit", "cluster-a"), ("submit", "cluster-b")]
    err = " ".join(capsys.readouterr().err.split())
    assert "4 repeats this run submitted to a batch scheduler were not waited for" in err


def test_an_environment_that_cannot_start_stores_nothing_is_retried_and_fails_the_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.base.errors import BackendError

    class NoImage(Backend):
        kind = "local"
        config = LocalEnvironment

        def __enter__(self) -> Backend:
            raise BackendError("image 'nvcr.io/nvidia/pytorch:18.07-py3' is not on this engine")

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            raise AssertionError("never reached")

    monkeypatch.setattr(execute.backends, "get", lambda kind: NoImage)
    m = matrix_mod.parse(MATRIX.replace("backend: slurm", "backend: local"), tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        # Nothing was tried, so nothing is stored as if it had been; the run says so and is not complete.
        assert list(store.rows(latest_only=False)) == [] and store.claims({c.key for c in m.cells()}) == {}
        assert report.exit_code == execute.EXIT_NOT_MEASURED and report.unsuccessful == {}
        assert report.not_started == {"cluster-a": 2, "here": 2, "cluster-b": 2}
        assert "is not on this engine" in report.cannot_start["here"]
        assert [r.status for r in store.runs()] == ["incomplete"]
        # The next run tries every repeat again without --rerun-failed.
        assert len(execute.todo(m.cells(), store)) == 6
        events: list[tuple[str, str]] = []
        monkeypatch.setattr(execute.backends, "get", lambda kind: fakes(events, elsewhere=False)["local"])
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        assert report.exit_code == execute.EXIT_OK and {r.status for r in store.rows()} == {"ok"}
        assert [r.status for r in store.runs()] == ["incomplete", "complete"]


def test_a_failed_repeat_fails_the_exit_code_even_when_nothing_is_left_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Fails(Backend):
        kind = "local"
        config = LocalEnvironment

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            for i, t in enumerate(tasks):
                sink(t, Outcome(Status.FAILED if i == 0 else Status.UNSUPPORTED, None, "", "boom", 0.0, 1.0))

    monkeypatch.setattr(execute.backends, "get", lambda kind: Fails)
    m = matrix_mod.parse(MATRIX.replace("backend: slurm", "backend: local"), tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        assert execute.run_matrix(m, m.cells(), store, workdir=tmp_path,
                                  console=Console(quiet=True)).unsuccessful == {"failed": 3}
        again = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        assert again.run_id is None and again.exit_code == execute.EXIT_NOT_MEASURED


def test_schedule_is_a_pure_function() -> None:
    def w(name: str, queued: bool = False, elsewhere: bool = False) -> execute.EnvWork:
        return execute.EnvWork((name,), queued, elsewhere)  # type: ignore[arg-type]

    a, here, b = w("a", True, True), w("here"), w("b", True, False)
    names = [(s.work.tasks[0], s.submit_only) for s in execute.schedule([a, here, b])]
    assert names == [("a", True), ("b", True), ("a", False), ("b", False), ("here", False)]
    names = [(s.work.tasks[0], s.submit_only) for s in execute.schedule([a, here])]
    assert names == [("a", True), ("here", False), ("a", False)]
    assert [s.submit_only for s in execute.schedule([a, here], wait=False)] == [False, False]
    assert [s.work for s in execute.schedule([a])] == [a]


def test_rounds_interleave_repeats_and_keep_batch_jobs_in_the_first() -> None:
    m = matrix_mod.parse(MATRIX.replace("batch_size: [8]", "batch_size: [8, 16]").replace("repeats: 2", "repeats: 3"))
    tasks = [execute.Task(c, r) for c in m.cells() for r in range(3)]
    assert execute.rounds(tasks, interleave=False) == [tasks]
    assert execute.rounds([], interleave=False) == []
    plan = execute.rounds(tasks, interleave=True, queued={"cluster-a", "cluster-b"})
    said = [[(t.cell.env_name, t.cell.params["batch_size"], t.repeat) for t in part] for part in plan]
    assert len(plan) == 3 and sorted(t.id for part in plan for t in part) == sorted(t.id for t in tasks)
    # The batch scheduler's tasks are submitted once, in the first round; the rest alternate by repeat.
    assert [x for x in said[0] if x[0] != "here"] == [(e, b, r) for e in ("cluster-a", "cluster-b")
                                                     for b in (8, 16) for r in range(3)]
    for r, part in enumerate(said):
        assert [x for x in part if x[0] == "here"] == [("here", 8, r), ("here", 16, r)]


def test_interleaved_run_alternates_environments_and_tries_one_that_cannot_start_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.base.errors import BackendError

    events: list[tuple[str, str]] = []
    here = fakes(events, elsewhere=False)["local"]
    opened: list[str] = []

    class Sometimes(here):  # type: ignore[valid-type, misc]
        def __enter__(self) -> Backend:
            opened.append(self.env.name)
            if self.env.name == "broken":
                raise BackendError("image 'x' is not on this engine")
            return self

    monkeypatch.setattr(execute.backends, "get", lambda kind: Sometimes)
    text = """
name: aa
environments: [{name: a, backend: local}, {name: b, backend: local}, {name: broken, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 3, interleave: true}
"""
    m = matrix_mod.parse(text, tmp_path / "m.yaml")
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(quiet=True))
        stored = [(r.environment, r.repeat, r.status) for r in store.rows()]
    assert events == [("run", "a"), ("run", "b")] * 3
    assert opened == ["a", "b", "broken", "a", "b", "a", "b"]  # broken: tried in the first round only
    assert stored == [(e, r, "ok") for r in range(3) for e in ("a", "b")]
    assert report.not_started == {"broken": 3} and report.exit_code == execute.EXIT_NOT_MEASURED


def test_batch_tasks_another_run_holds_are_neither_submitted_nor_collected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor claims a batch environment's tasks before handing them over: a task another live run
    holds (submitting or gathering it) is left to that run, by `run --no-wait` and by `collect` alike."""
    from runner.store import BatchJob

    events: list[tuple[str, str]] = []
    registry = fakes(events, elsewhere=True)
    registry["slurm"].submitted = {}
    handed: list[str] = []

    class Watching(registry["slurm"]):  # type: ignore[valid-type, misc]
        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            handed.extend(t.id for t in tasks)
            super().run(tasks, sink)

    registry["slurm"] = Watching
    monkeypatch.setattr(execute.backends, "get", lambda kind: registry[kind])
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    cells = matrix_mod.select(m.cells(), ["cluster-a"], ())
    theirs = Task(cells[0], 0)
    with Store(tmp_path / "r.db") as store:
        store.db.execute("INSERT INTO holders (run_id, schema, host, ident, pid, started_at, heartbeat) "
                         "VALUES ('other', 1, 'login2', 'x', 7, 0, ?)", (__import__("time").time(),))
        store.db.execute("INSERT INTO claims (cell_key, repeat, run_id, claimed_at) VALUES (?, 0, 'other', 0)", (cells[0].key,))
        report = execute.run_matrix(m, cells, store, workdir=tmp_path, wait=False, console=Console(quiet=True))
        assert handed == [Task(cells[0], 1).id] and report.exit_code == execute.EXIT_BUSY
        # Both are waiting as jobs now; collect gathers only the one no live run holds.
        store.add_jobs("slurm", [BatchJob(f"k{r}", Task(cells[0], r).id, "x", "1", r, str(tmp_path), 0.0)
                                 for r in (0, 1)])
        handed.clear()
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, submit=False, console=Console(quiet=True))
        assert handed == [Task(cells[0], 1).id] and theirs.id not in handed
        assert events[-1] == ("wait", "cluster-a") and ("run", "here") not in events, "collect starts nothing here"
        assert report.exit_code == execute.EXIT_BUSY and list(report.busy) == ["other"]
