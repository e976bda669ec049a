"""The SQLite store: round trip, append-only, resume decisions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runner import matrix
from runner.base.errors import ConfigError, StoreError
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.store import Store

M = matrix.parse("""
environments: [{name: cpu, backend: local, tags: [metal]}]
axes: {model: [mnist_cnn], precision: [fp32, bf16]}
run: {repeats: 2}
""")


def ok(tput: float) -> Outcome:
    return Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": tput},
                               "env": {"torch": "2.13.0"}}, "log", "", 1.0, 2.0, {"backend": "local"})


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    cell = M.cells()[0]
    with Store(tmp_path / "m.db") as store:
        store.start_run("r1", "m.yaml", "m", ["run"])
        store.add("r1", Task(cell, 0), ok(123.0))
        store.finish_run("r1", "complete")
    with Store(tmp_path / "m.db", create=False) as store:
        (row,) = store.rows()
        assert row.cell_key == cell.key and row.repeat == 0 and row.tags == ("metal",)
        assert row.params["precision"] == "fp32" and row.metrics == {"throughput": 123.0}
        assert row.env["torch"] == "2.13.0" and row.env["backend"] == "local"
        assert row.raw["status"] == "ok" and row.log_tail == "log"
        (run,) = store.runs()
        assert run.status == "complete" and run.counts == {"ok": 1}


def test_append_only(tmp_path: Path) -> None:
    with Store(tmp_path / "m.db") as store:
        store.add("r1", Task(M.cells()[0], 0), ok(1.0))
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store.db.execute("DELETE FROM results")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store.db.execute("UPDATE results SET status='ok'")


def test_resume_runs_only_what_is_missing(tmp_path: Path) -> None:
    cells = M.cells()
    with Store(tmp_path / "m.db") as store:
        assert len(execute.todo(cells, store)) == 4
        store.add("r1", Task(cells[0], 0), ok(1.0))
        store.add("r1", Task(cells[0], 1), Outcome(Status.FAILED, reason="boom"))
        store.add("r1", Task(cells[1], 0), Outcome(Status.CANCELLED, reason="Ctrl-C"))
        store.add("r1", Task(cells[1], 1), Outcome(Status.OOM, reason="oom"))
        assert [t.id for t in execute.todo(cells, store)] == [f"{cells[1].key}-r0"]
        # --rerun-failed runs failed, oom and timed-out repeats again, as its help and the summary say.
        assert [t.id for t in execute.todo(cells, store, rerun_failed=True)] == [
            f"{cells[0].key}-r1", f"{cells[1].key}-r0", f"{cells[1].key}-r1"]
        assert len(execute.todo(cells, store, force=True)) == 4
        # A newer row wins, and the old one is still there.
        store.add("r2", Task(cells[0], 1), ok(2.0))
        assert store.latest_statuses([cells[0].key])[(cells[0].key, 1)] is Status.OK
        assert len(list(store.rows(latest_only=False))) == 5
        assert [r.run_id for r in store.rows(["r1"])].count("r1") == 4


def test_unknown_schema_says_what_to_do(tmp_path: Path) -> None:
    Store(tmp_path / "m.db").close()
    db = sqlite3.connect(tmp_path / "m.db")
    db.execute("UPDATE meta SET value='99' WHERE key='schema'")
    db.commit()
    with pytest.raises(StoreError, match="schema 99; this matrix reads schema 2"):
        Store(tmp_path / "m.db")


def test_missing_store_and_runs(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="run `matrix run` first"):
        Store(tmp_path / "nope.db", create=False)
    with Store(tmp_path / "m.db") as store:
        with pytest.raises(StoreError, match="no runs"):
            store.resolve_run(None)
        store.start_run("20260101-aaa", None, None, [])
        store.start_run("20260102-bbb", None, None, [])
        assert store.resolve_run(None) == "20260102-bbb"
        assert store.resolve_run("20260101") == "20260101-aaa"
        with pytest.raises(ConfigError, match="is ambiguous"):
            store.resolve_run("2026")


def test_a_whole_run_id_names_that_run_even_when_an_import_extends_it(tmp_path: Path) -> None:
    """A run id that is also the start of an imported one (`id@store`) was 'ambiguous' whatever was typed: every
    prefix of the local run, the whole id included, matched both, so no reference could name it."""
    with Store(tmp_path / "m.db") as store:
        store.start_run("20260101-aaa", None, None, [])
        with store.db:
            store.db.execute("INSERT INTO runs (run_id, schema, started_at, argv, status) VALUES "
                             "('20260101-aaa@0123456789ab', 1, 5.0, '[]', 'complete')")
        assert store.resolve_run("20260101-aaa") == "20260101-aaa"
        assert store.resolve_run("20260101-aaa@0") == "20260101-aaa@0123456789ab"
        with pytest.raises(ConfigError, match="is ambiguous"):
            store.resolve_run("20260101")


def test_reading_writes_nothing_and_works_on_a_store_that_cannot_be_written(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    path = folder / "m.db"
    with Store(path) as store:
        store.start_run("r1", None, "m", [])
        store.add("r1", Task(M.cells()[0], 0), ok(10.0))
    before = path.read_bytes()
    with Store(path, readonly=True) as store:
        assert [r.run_id for r in store.runs()] == ["r1"] and len(list(store.rows())) == 1
        with pytest.raises(StoreError, match="opened read-only"):
            store.start_run("r2", None, "m", [])
    assert path.read_bytes() == before
    # A file and folder nobody may write (root included: the immutable attribute), as a shared results file.
    import shutil
    import subprocess
    chattr = shutil.which("chattr")
    if not chattr or subprocess.run([chattr, "+i", str(path), str(folder)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        with Store(path, readonly=True) as store:
            assert [r.run_id for r in store.runs()] == ["r1"]
            assert [s.value for s in store.latest_statuses([M.cells()[0].key]).values()] == ["ok"]
    finally:
        subprocess.run([chattr, "-i", str(path), str(folder)], check=True)
    with pytest.raises(StoreError, match="not a matrix result store"):
        other = folder / "other.db"
        sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
        Store(other, readonly=True)
