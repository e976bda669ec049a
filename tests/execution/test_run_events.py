"""A run tells a RunListener what happens, through typed methods: the printer is one listener, this test's
recorder another (runner/execution/events.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from runner import matrix
from runner.backends.base import SequentialBackend
from runner.backends.local import LocalEnvironment
from runner.domain.cells import Cell, Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.execution.events import RunListener, RunReport
from runner.store import Store


class Here(SequentialBackend):
    kind = "local"
    config = LocalEnvironment

    def run_one(self, task: Task) -> Outcome:
        if task.cell.params.get("batch_size") == 16:
            return Outcome(Status.FAILED, reason="boom")
        return Outcome(Status.OK, {"metrics": {"throughput": 10.0}})


class Recorder(RunListener):
    def __init__(self) -> None:
        self.said: list[str] = []

    def started(self, run_id: str, n: int, stored: int, again: int, store: Path, *args: Any, **kw: Any) -> None:
        self.said.append(f"started {n} {stored}")

    def task_started(self, task: Task) -> None:
        self.said.append(f"task {task.id}")

    def outcome(self, task: Task, outcome: Outcome) -> None:
        self.said.append(f"{outcome.status.value} {task.id}")

    def nothing_to_run(self, cells: Sequence[Cell], repeats: int | str, store: Path,
                       unsuccessful: Counter[str] | None = None) -> None:
        self.said.append("nothing")

    def summary(self, cells: Sequence[Cell], rows: Sequence[dict[str, Any]], report: RunReport,
                held: Any = None) -> None:
        self.said.append(f"summary {sum(report.stored.values())} {dict(report.unsuccessful)}")


def test_a_listener_hears_each_event_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute.backends, "get", lambda kind: Here)
    m = matrix.parse("environments: [{name: a, backend: local}]\n"
                     "axes: {model: [mlp], precision: [fp32], batch_size: [8, 16], device: [cpu]}\n"
                     "run: {repeats: 1}\n")
    small, large = (Task(c, 0).id for c in m.cells())
    with Store(tmp_path / "r.db") as store:
        heard = Recorder()
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path, listener=heard)
        assert heard.said == ["started 2 0", f"task {small}", f"ok {small}", f"task {large}", f"failed {large}",
                              "summary 2 {'failed': 1}"]
        assert report.exit_code == execute.EXIT_NOT_MEASURED
        again = Recorder()
        execute.run_matrix(m, m.cells(), store, workdir=tmp_path, listener=again)
        assert again.said == ["nothing"]
