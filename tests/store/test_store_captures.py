"""What an environment is made of is stored once per distinct content (captures), referenced by each result; a
store of schema 1 is migrated on first write without losing anything, and read as it is when read-only."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from runner import matrix
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.store import SCHEMA, STORE_SCHEMA, Store, split_capture

M = matrix.parse("""
environments: [{name: cpu, backend: local}]
axes: {model: [mnist_cnn], precision: [fp32, bf16]}
run: {repeats: 3}
""")

# The store as matrix wrote it before captures (schema 1): these tables, and no capture_id.
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL,
    matrix_path TEXT, matrix_name TEXT, argv TEXT, host TEXT, status TEXT NOT NULL);
CREATE TABLE results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, run_id TEXT NOT NULL,
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, environment TEXT NOT NULL, backend TEXT NOT NULL,
    tags TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    metrics TEXT, env TEXT, raw TEXT, log_tail TEXT, started_at REAL, finished_at REAL);
CREATE INDEX results_cell ON results (cell_key, repeat);
CREATE TRIGGER results_no_update BEFORE UPDATE ON results BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TRIGGER results_no_delete BEFORE DELETE ON results BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
INSERT INTO meta VALUES ('schema', '1');
"""


def software(torch_pkg: str = "2.13.0") -> dict[str, object]:
    return {"python_packages": {"torch": torch_pkg, "numpy": "2.1.0"}, "env_vars": {"OMP_NUM_THREADS": "2"},
            "dpkg": {"libc6": "2.36-9", "libgomp1": "12.2.0-14"}, "torch_config": "PyTorch built with:\n  - GCC 12.2"}


def outcome(tput: float, soft: dict[str, object] | None) -> Outcome:
    env: dict[str, object] = {"torch": "2.13.0", "python": "3.11.2", "os": "Debian GNU/Linux 12 (bookworm)"}
    if soft is not None:
        env["software"] = soft
    return Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": tput}, "env": env,
                               "precision": {"mechanism": "none", "dtype": "float32"}}, "log", "", 1.0, 2.0)


def old_store(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(SCHEMA_1)
    cell = M.cells()[0]
    db.execute("INSERT INTO runs VALUES ('r0', 1, 1.0, 2.0, 'm.yaml', 'm', '[]', 'host', 'complete')")
    for r in range(2):
        db.execute("INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params, status,"
                   " reason, metrics, env, raw, log_tail, started_at, finished_at) VALUES "
                   "(1, 'r0', ?, ?, 'cpu', 'local', '[]', ?, 'ok', '', ?, ?, ?, 'log', 1.0, 2.0)",
                   (cell.key, r, json.dumps(dict(cell.params)), json.dumps({"throughput": 100.0 + r}),
                    json.dumps({"torch": "1.13.0"}), json.dumps({"schema": 1, "status": "ok"})))
    db.commit()
    db.close()
    return path


def dump(path: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(path)
    try:
        cols = "id, schema, run_id, cell_key, repeat, environment, backend, tags, params, status, reason, metrics, " \
               "env, raw, log_tail, started_at, finished_at"
        return list(db.execute(f"SELECT {cols} FROM results ORDER BY id"))
    finally:
        db.close()


def test_a_capture_is_stored_once_and_each_result_refers_to_it(tmp_path: Path) -> None:
    cells = M.cells()
    with Store(tmp_path / "c.db") as store:
        for cell in cells:
            for r in range(3):
                store.add("r1", Task(cell, r), outcome(100.0 + r, software()))
        store.add("r1", Task(cells[0], 0), outcome(99.0, software("2.14.0")))  # another content: another capture
        store.add("r1", Task(cells[1], 0), outcome(98.0, None))                # none captured (an older bench)
        n_captures = store.db.execute("SELECT COUNT(*) FROM captures").fetchone()[0]
        assert n_captures == 2
        rows = list(store.rows(latest_only=False))
        assert all("software" not in r.env and "software" not in r.raw["env"] for r in rows)
        ids = [r.capture_id for r in rows]
        assert len(set(ids[:6])) == 1 and ids[6] != ids[0] and ids[7] is None
        text = json.dumps(software(), sort_keys=True, separators=(",", ":"))
        assert ids[0] == hashlib.sha256(text.encode()).hexdigest()  # content-addressed
        got = store.captures(ids)
        assert got[ids[0]] == software() and got[ids[6]]["python_packages"]["torch"] == "2.14.0"
        assert store.captures(["nope", None]) == {}
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store.db.execute("DELETE FROM captures")
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            store.db.execute("UPDATE captures SET content='{}'")
        # The rest of the result is as before: its env keeps the small facts.
        assert rows[0].env["os"] == "Debian GNU/Linux 12 (bookworm)" and rows[0].metrics["throughput"] == 100.0


def test_split_capture_leaves_the_outcome_alone() -> None:
    out = outcome(1.0, software())
    env, raw, capture = split_capture(out.env, out.result)
    assert capture is not None and "software" not in env and raw is not None and "software" not in raw["env"]
    assert out.result is not None and "software" in out.result["env"]  # the outcome itself is not changed
    assert split_capture({"torch": "x"}, None) == ({"torch": "x"}, None, None)


def test_a_schema_1_store_is_migrated_on_first_write_without_losing_a_row(tmp_path: Path) -> None:
    path = old_store(tmp_path / "old.db")
    before = dump(path)
    with Store(path) as store:
        assert store.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()[0] == str(STORE_SCHEMA)
        old = list(store.rows())
        assert [r.metrics["throughput"] for r in old] == [100.0, 101.0]
        assert all(r.capture_id is None for r in old)
        assert all(r["schema"] == SCHEMA for r in store.decoded()), "the rows of schema 1, read as they are"
        store.add("r1", Task(M.cells()[0], 2), outcome(102.0, software()))
        (new,) = [r for r in store.rows() if r.repeat == 2]
        assert new.capture_id in store.captures([new.capture_id])
        assert [i.run_id for i in store.runs()] == ["r0"]
    assert dump(path)[:2] == before  # every old row as it was, column by column
    with Store(path) as store:  # opening again: nothing to migrate, nothing changes
        assert len(list(store.rows())) == 3


def test_a_schema_1_store_read_only_is_read_as_it_is(tmp_path: Path) -> None:
    path = old_store(tmp_path / "old.db")
    data = path.read_bytes()
    with Store(path, readonly=True) as store:
        rows = list(store.rows())
        assert [r.capture_id for r in rows] == [None, None] and store.captures(["x"]) == {}
        assert store.environments() == ["cpu"]
    assert path.read_bytes() == data  # no DDL, no migration, nothing written


def test_two_stores_open_at_once_migrate_once(tmp_path: Path) -> None:
    path = old_store(tmp_path / "old.db")
    first, second = Store(path), Store(path)  # the second finds schema 2 under the write lock: no second ALTER
    try:
        cols = [r[1] for r in first.db.execute("PRAGMA table_info(results)")]
        assert cols.count("capture_id") == 1
    finally:
        first.close()
        second.close()


def test_a_journal_keeps_the_capture_and_an_older_journal_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                 ) -> None:
    """A result a full disk kept out goes with its capture; a journal written before captures (no capture_id in
    its row) imports as it is."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cell = M.cells()[0]
    with Store(tmp_path / "j.db") as store:
        values, capture = store._values("r1", Task(cell, 0), outcome(100.0, software()))
        from runner.store import _COLUMNS
        row = dict(zip(_COLUMNS, values, strict=True))
        assert capture is not None
        store._keep({"kind": "result", "row": row, "capture": {"id": capture.id, "content": capture.content}})
        old_row = {k: v for k, v in dict(zip(_COLUMNS, store._values("r0", Task(cell, 1),
                                                                     outcome(50.0, None))[0], strict=True)).items()
                   if k != "capture_id"}
        store._keep({"kind": "result", "row": old_row})
    with Store(tmp_path / "j.db") as store:
        rows = {r.repeat: r for r in store.rows()}
        assert rows[0].capture_id == capture.id and store.captures([capture.id])[capture.id] == software()
        assert rows[1].capture_id is None and rows[1].metrics["throughput"] == 50.0
