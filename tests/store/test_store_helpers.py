"""The store's two shared helpers: the chunked `IN (...)` read (more values than SQLite takes in one statement, read
by every part that reads by a list of keys) and the one line for rows of a schema this matrix does not read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.base.errors import StoreError
from runner.store import Store, this_process
from runner.store.db import IN_CHUNK
from runner.store.schema import INSERT_RESULT

N = 2 * IN_CHUNK + 7  # three chunks, the last one short
KEYS = [f"cell-{i:05d}" for i in range(N)]


def result(key: str, schema: int = 1) -> tuple[Any, ...]:
    return (schema, "old", key, 0, "cpu", "local", "[]", "{}", "ok", None, "{}", "{}", None, "", 1.0, 2.0, None)


def live_holder(store: Store, run_id: str) -> None:
    me = this_process()
    store.db.execute("INSERT INTO holders (run_id, schema, host, ident, pid, pid_start, started_at, heartbeat) "
                     "VALUES (?, 1, ?, ?, ?, ?, ?, ?)", (run_id, me.host, me.ident, me.pid, me.start, 0.0, time.time()))


def test_every_keyed_read_takes_more_keys_than_one_statement_holds(tmp_path: Path) -> None:
    with Store(tmp_path / "r.db") as store:
        live_holder(store, "other")
        now = time.time()
        store.db.executemany(INSERT_RESULT, [result(k) for k in KEYS])
        store.db.executemany("INSERT INTO calibrations VALUES (?, 1, ?, 'old', 0, NULL, ?)",
                             [(k, i + 1, now) for i, k in enumerate(KEYS)])
        store.db.executemany("INSERT INTO claims (cell_key, repeat, run_id, claimed_at) VALUES (?, 1, 'other', ?)",
                             [(k, now) for k in KEYS])
        store.db.executemany("INSERT INTO captures VALUES (?, 1, ?, ?)",
                             [(k, json.dumps({"n": i}), now) for i, k in enumerate(KEYS)])
        assert len(store.latest(KEYS)) == N
        assert store.calibrations(KEYS) == {k: i + 1 for i, k in enumerate(KEYS)}
        assert set(store.claims(KEYS)) == {(k, 1) for k in KEYS}
        assert store.captures(KEYS)[KEYS[-1]] == {"n": N - 1} and len(store.captures(KEYS)) == N
        assert store.calibrations(KEYS[:3]) == {KEYS[0]: 1, KEYS[1]: 2, KEYS[2]: 3}  # only what was asked


NEWER: dict[str, tuple[str, Callable[[Store], object], str]] = {
    "holders": ("INSERT INTO holders VALUES ('r9', 99, 'h', 'i', 1, NULL, 0, 0, NULL)", lambda s: s.runs(),
                "holds runs of holder schema 99; this matrix reads schema 1: it was written by a newer matrix"),
    "calibrations": ("INSERT INTO calibrations VALUES ('k', 99, 5, 'r', 0, NULL, 0)", lambda s: s.calibrations(["k"]),
                     "holds calibrations of schema 99; this matrix reads schema 1: it was written by a newer matrix"),
    "captures": ("INSERT INTO captures VALUES ('abc', 99, '{}', 0)", lambda s: s.captures(["abc"]),
                 "holds capture abc of schema 99; this matrix reads schema 1: it was written by a newer matrix"),
    "bisects": ("INSERT INTO bisects (schema, started_at, finished_at, argv, metric, outcome, cell_keys, answer) "
                "VALUES (99, 0, 0, '[]', 'm', 'o', '[]', '{}')", lambda s: s.bisects(),
                "holds a bisect answer of schema 99; this matrix reads schema 1: it was written by a newer matrix"),
    "batch_jobs": ("INSERT INTO batch_jobs (schema, backend, task_key, task_id, run_id, job, idx, results_dir, "
                   "submitted_at) VALUES (99, 'slurm', 'k', 't', 'r', '1', 0, '/x', 0)", lambda s: s.open_jobs("slurm"),
                   "holds slurm jobs of schema 99; this matrix reads schema 1: collect them with the matrix version"),
    "results": ("", lambda s: list(s.rows()),
                "of row schema 99; this matrix reads schema 1: it was written by another matrix version"),
}


@pytest.mark.parametrize("table", list(NEWER))
def test_rows_of_a_schema_this_matrix_does_not_read_are_one_line_naming_the_store(tmp_path: Path, table: str) -> None:
    sql, read, said = NEWER[table]
    with Store(tmp_path / "r.db") as store:
        if sql:
            store.db.execute(sql)
        else:
            store.db.execute(INSERT_RESULT, result("k", schema=99))
        with pytest.raises(StoreError) as refused:
            read(store)
    text = str(refused.value)
    assert text.startswith(str(tmp_path / "r.db")) and said in text and "\n" not in text, text
