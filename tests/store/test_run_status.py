"""A run is `complete` only when every repeat it planned ended: one function (runner/store/runs.py, `run_status`)
answers it, `matrix run` closes its run with that answer, and `matrix ls` and the report ask it again of what is
stored, a store written before the rule included. The progress line names its axes; `doctor` says what it probes;
`show` of a run that stored nothing says so."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from io import StringIO
from pathlib import Path
from typing import Any, ClassVar

import pytest
from rich.console import Console
from typer.testing import CliRunner

from runner import backends, cli
from runner import matrix as matrix_mod
from runner.backends.base import Backend, NotStarted, Probe
from runner.backends.local import LocalEnvironment
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.execution.printer import RunPrinter
from runner.store import Store, run_status

MATRIX = """
name: status
environments: [{name: here, backend: local}, {name: gone, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8, 32], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 2}
"""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(("stored", "counts", "alive", "left", "said"), [
    ("complete", {"ok": 4}, None, 0, "complete"),
    ("complete", {"ok": 3, "not_started": 1}, None, 0, "incomplete"),
    ("complete", {"ok": 3, "cancelled": 1}, None, 0, "incomplete"),
    ("complete", {"ok": 2, "failed": 1, "oom": 1}, None, 0, "complete"),  # each repeat ended, badly or not
    ("complete", {}, None, 4, "incomplete"),                                # planned and never stored
    ("running", {"ok": 1}, False, 0, "killed"),
    ("running", {"ok": 1}, True, 0, "running"),
    ("submitted", {"not_started": 1}, None, 0, "submitted"),
    ("interrupted", {}, None, 0, "interrupted"),
])
def test_run_status(stored: str, counts: dict[str, int], alive: bool | None, left: int, said: str) -> None:
    assert run_status(stored, counts, alive=alive, left=left) == said


class HalfThere(Backend):
    """`here` measures; `gone` cannot start (its image cannot be had)."""

    kind = "local"
    config = LocalEnvironment
    opened: ClassVar[list[str]] = []

    def __enter__(self) -> Backend:
        self.opened.append(self.env.name)
        if self.env.name == "gone":
            raise NotStarted("image 'gone:1' is not on this engine and pulling it failed: no registry")
        return self

    def run(self, tasks: Sequence[Task], sink: Any) -> None:
        for t in tasks:
            sink(t, Outcome(Status.OK, {"status": "ok", "metrics": {"throughput": 5.0}}, "", "", 0.0, 1.0))


def test_a_run_that_left_repeats_unstarted_is_incomplete_in_ls_and_the_report(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execute.backends, "get", lambda kind: HalfThere)
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    db = tmp_path / "r.db"
    err = StringIO()
    with Store(db) as store:
        report = execute.run_matrix(m, m.cells(), store, workdir=tmp_path,
                                    listener=RunPrinter(Console(file=StringIO()), Console(file=err, width=300),
                                                        m.cells()))
        assert report.not_started == {"gone": 4} and report.exit_code == execute.EXIT_NOT_MEASURED
        assert {r.environment for r in store.rows()} == {"here"}
    (line,) = [ln for ln in err.getvalue().splitlines() if ln.startswith("not started gone")]
    assert "4 repeats not run, nothing stored" in line
    code, out = invoke("ls", "--db", str(db))
    assert code == 0 and "│ incomplete │ 4 ok " in out, out
    code, out = invoke("report", "--db", str(db), "--format", "json", "--out", str(tmp_path / "rep"))
    assert code == 0, out
    doc = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert [r["status"] for r in doc["runs"]] == ["incomplete"], doc["runs"]


def test_a_store_that_called_a_run_complete_with_repeats_not_started_shows_it_incomplete(tmp_path: Path) -> None:
    """A store written before the rule: the run was closed `complete` over `not_started` rows."""
    from tests.report.conftest import fill_store, load_results

    db = fill_store(tmp_path / "r.db", load_results())
    with sqlite3.connect(db) as con:
        run_id = con.execute("SELECT run_id FROM runs ORDER BY started_at LIMIT 1").fetchone()[0]
        con.execute("UPDATE runs SET status='complete' WHERE run_id=?", (run_id,))
        cols = [r[1] for r in con.execute("PRAGMA table_info(results)") if r[1] not in ("id", "status", "run_id")]
        con.execute(f"INSERT INTO results ({', '.join(cols)}, status, run_id) SELECT {', '.join(cols)}, "
                    "'not_started', ? FROM results LIMIT 1", (run_id,))
    con.close()
    with Store(db, readonly=True) as store:
        assert next(r.status for r in store.runs() if r.run_id == run_id) == "incomplete"


def test_the_progress_line_names_its_axes(tmp_path: Path) -> None:
    m = matrix_mod.parse(MATRIX, tmp_path / "m.yaml")
    cells = m.cells()
    printer = RunPrinter(Console(file=StringIO()), Console(file=StringIO()), cells)
    task = Task(next(c for c in cells if c.params["batch_size"] == 32), 0)
    printer.task_started(task)
    (bar,) = printer.progress.tasks
    assert bar.description.startswith(f"{task.cell.env_name} batch_size=32 [dim]repeat 1/2"), bar.description
    quick = matrix_mod.load(None).cells()  # names say what they are; numbers are named by their axis
    printer = RunPrinter(Console(file=StringIO()), Console(file=StringIO()), quick)
    printer.task_started(Task(quick[-1], 2))
    assert printer.progress.tasks[0].description == ("local-cpu wrn bf16 batch_size=64 wrn_depth=10 wrn_width=1 "
                                                     "[dim]repeat 3/3[/]")


def test_doctor_says_what_it_probes_before_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    class Slow(Backend):
        kind = "slow"
        config = LocalEnvironment
        probes = "the slow engine"

        @classmethod
        def doctor(cls) -> list[Probe]:
            return [Probe("slow engine", True, "answered")]

        def run(self, tasks: Sequence[Task], sink: Any) -> None:
            raise AssertionError("never run")

    monkeypatch.setattr(backends, "kinds", lambda: ["slow"])
    monkeypatch.setattr(backends, "get", lambda kind: Slow)
    code, out = invoke("doctor")
    assert code == 0, out
    assert "probing slow: the slow engine ..." in out
    assert out.index("probing slow") < out.index("matrix doctor") < out.index("answered")


def test_show_of_a_run_that_stored_nothing_says_so(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        store.start_run("20260101-aaa", None, "m", [])
        store.finish_run("20260101-aaa", run_status("complete", {}, left=6))
    code, out = invoke("show", "--db", str(tmp_path / "r.db"))
    assert code == 0 and "run 20260101-aaa (incomplete) stored no repeat" in out, out
