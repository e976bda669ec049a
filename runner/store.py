"""The result store: SQLite, append-only, one row per repeat (docs/internals.md, "Store")."""

from __future__ import annotations

import json
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import StoreError
from runner.results import Outcome, Status
from runner.spec import Task

SCHEMA = 1
DEFAULT_DB = Path("results/matrix.db")

_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL,
    matrix_path TEXT, matrix_name TEXT, argv TEXT, host TEXT, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, run_id TEXT NOT NULL,
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, environment TEXT NOT NULL, backend TEXT NOT NULL,
    tags TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    metrics TEXT, env TEXT, raw TEXT, log_tail TEXT, started_at REAL, finished_at REAL);
CREATE INDEX IF NOT EXISTS results_cell ON results (cell_key, repeat);
CREATE INDEX IF NOT EXISTS results_run ON results (run_id);
CREATE TRIGGER IF NOT EXISTS results_no_update BEFORE UPDATE ON results
    BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TRIGGER IF NOT EXISTS results_no_delete BEFORE DELETE ON results
    BEGIN SELECT RAISE(ABORT, 'results are append-only'); END;
CREATE TABLE IF NOT EXISTS batch_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, backend TEXT NOT NULL,
    task_key TEXT NOT NULL, task_id TEXT NOT NULL, run_id TEXT NOT NULL, job TEXT NOT NULL,
    idx INTEGER NOT NULL, results_dir TEXT NOT NULL, submitted_at REAL NOT NULL,
    closed_at REAL, closed_how TEXT);
CREATE INDEX IF NOT EXISTS batch_jobs_open ON batch_jobs (backend, closed_at);
"""
# batch_jobs: tasks handed to a batch scheduler and not yet collected. A submission appends a row;
# collecting it sets closed_at (rows are never deleted). Its own schema, per row: a store written by
# an older matrix gains the table without a migration.
JOBS_SCHEMA = 1


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    started_at: float
    finished_at: float | None
    matrix_name: str | None
    matrix_path: str | None
    host: str | None
    status: str
    counts: dict[str, int]


@dataclass(frozen=True)
class BatchJob:
    """One array task of a batch scheduler, as `batch_jobs` keeps it."""

    task_key: str
    task_id: str
    run_id: str
    job: str
    index: int
    results_dir: str
    submitted_at: float


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


JSON_COLUMNS: dict[str, type] = {"tags": list, "params": dict, "metrics": dict, "env": dict, "raw": dict}


class Store:
    """Opens (and creates) the database; every write is its own short transaction."""

    def __init__(self, path: Path | str = DEFAULT_DB, create: bool = True, readonly: bool = False) -> None:
        """`readonly`: open an existing store for reading only; nothing is written, not even the schema, so a
        results file shared read-only (or on a read-only mount) reads as well as one's own."""
        self.path = Path(path)
        self.readonly = readonly
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"no result store at {self.path}: run `matrix run` first, or pass --db PATH")
        try:
            if readonly:
                self.db = self._connect_readonly()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, timeout=30)
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(_DDL)
            self._check_schema()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"{self.path} is not a matrix result store ({e})") from e
        self.db.row_factory = sqlite3.Row

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=30)
        try:
            db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
            return db
        except sqlite3.OperationalError:
            # A WAL store in a directory we may not write (no -shm to create): read it as immutable.
            db.close()
            return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=30)

    def _check_schema(self) -> None:
        if self.readonly:
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if not {"meta", "runs", "results"} <= tables:
                raise StoreError(f"{self.path} is not a matrix result store (no runs/results tables)")
        row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None and not self.readonly:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        elif row is not None and int(row[0]) != SCHEMA:
            raise StoreError(f"{self.path} has store schema {row[0]}; this matrix reads schema {SCHEMA}: "
                             "use the matrix version that wrote it, or start a new store with --db")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # runs -----------------------------------------------------------------------------------
    def start_run(self, run_id: str, matrix_path: str | None, matrix_name: str | None,
                  argv: list[str]) -> None:
        with self.db:
            self.db.execute(
                "INSERT INTO runs (run_id, schema, started_at, matrix_path, matrix_name, argv, host, status)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
                (run_id, SCHEMA, time.time(), matrix_path, matrix_name, json.dumps(argv), socket.gethostname()))

    def finish_run(self, run_id: str, status: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE run_id=?", (time.time(), status, run_id))

    def runs(self) -> list[RunInfo]:
        counts: dict[str, dict[str, int]] = {}
        for row in self.db.execute("SELECT run_id, status, COUNT(*) FROM results GROUP BY run_id, status"):
            counts.setdefault(row[0], {})[row[1]] = row[2]
        return [RunInfo(r["run_id"], r["started_at"], r["finished_at"], r["matrix_name"], r["matrix_path"],
                        r["host"], r["status"], counts.get(r["run_id"], {}))
                for r in self.db.execute("SELECT * FROM runs ORDER BY started_at")]

    def resolve_run(self, ref: str | None) -> str:
        """A run id from a prefix, or 'latest'/None for the newest run."""
        runs = [r.run_id for r in self.runs()]
        if not runs:
            raise StoreError(f"no runs in {self.path} yet: run `matrix run` first")
        if ref in (None, "latest"):
            return runs[-1]
        hits = [r for r in runs if r.startswith(ref or "")]
        if len(hits) != 1:
            shown = ", ".join(runs[-5:])
            raise StoreError(f"run {ref!r} {'is ambiguous' if hits else 'not found'}; recent runs: {shown}")
        return hits[0]

    # results --------------------------------------------------------------------------------
    def add(self, run_id: str, task: Task, outcome: Outcome) -> None:
        cell = task.cell
        with self.db:
            self.db.execute(
                "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
                " status, reason, metrics, env, raw, log_tail, started_at, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (SCHEMA, run_id, cell.key, task.repeat, cell.env_name, cell.environment.backend,
                 json.dumps(cell.environment.tags), json.dumps(dict(cell.params)), outcome.status.value,
                 outcome.reason, json.dumps(outcome.metrics), json.dumps(outcome.env, default=str),
                 json.dumps(outcome.result) if outcome.result is not None else None, outcome.log_tail,
                 outcome.started_at, outcome.finished_at))

    def latest_statuses(self, keys: Iterable[str]) -> dict[tuple[str, int], Status]:
        """The current status of every stored repeat of these cells (the newest row wins)."""
        keys = list(keys)
        found: dict[tuple[str, int], Status] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            for row in self.db.execute(
                    f"SELECT cell_key, repeat, status FROM results WHERE id IN (SELECT MAX(id) FROM results"
                    f" WHERE cell_key IN ({marks}) GROUP BY cell_key, repeat)", chunk):
                try:
                    found[(row[0], row[1])] = Status(row[2])
                except ValueError:
                    raise StoreError(f"{self.path}: repeat {row[1]} of cell {row[0]} has the unknown status "
                                     f"{row[2]!r}; the file is corrupt or written by a newer matrix") from None
        return found

    def rows(self, run_ids: Iterable[str] | None = None, latest_only: bool = True) -> Iterator[dict[str, Any]]:
        """Result rows with JSON decoded; by default only each repeat's newest row."""
        scope, args = "", []
        if run_ids is not None:
            ids = list(run_ids) or [""]
            scope = f" WHERE run_id IN ({','.join('?' * len(ids))})"
            args = ids
        if latest_only:
            sql = f"SELECT * FROM results WHERE id IN (SELECT MAX(id) FROM results{scope} GROUP BY cell_key, repeat)"
        else:
            sql = "SELECT * FROM results" + scope
        with closing(self.db.execute(sql + " ORDER BY id", args)) as cur:
            for row in cur:
                d = dict(row)
                for col, kind in JSON_COLUMNS.items():
                    d[col] = self._decoded(d, col, kind)
                yield d

    def _decoded(self, row: dict[str, Any], col: str, kind: type) -> Any:
        """One JSON column of a results row; damaged text or the wrong shape is a StoreError naming the row."""
        if row[col] is None:
            return None
        try:
            value = json.loads(row[col])
        except (TypeError, ValueError) as e:
            raise StoreError(f"{self.path}: results row {row.get('id')} has a damaged {col} ({e}); the file is "
                             "corrupt: restore it from a copy, or run into another --db") from e
        if value is not None and not isinstance(value, kind):
            raise StoreError(f"{self.path}: results row {row.get('id')}: {col} is a {type(value).__name__}, not "
                             f"a {kind.__name__}; the file is corrupt or not written by matrix")
        return value

    # batch jobs -----------------------------------------------------------------------------
    def add_jobs(self, backend: str, jobs: Iterable[BatchJob]) -> None:
        """Remember submitted tasks; an open row of the same task is closed as superseded."""
        now = time.time()
        with self.db:
            for j in jobs:
                self.db.execute("UPDATE batch_jobs SET closed_at=?, closed_how='superseded' WHERE backend=? "
                                "AND task_key=? AND closed_at IS NULL", (now, backend, j.task_key))
                self.db.execute(
                    "INSERT INTO batch_jobs (schema, backend, task_key, task_id, run_id, job, idx, results_dir,"
                    " submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (JOBS_SCHEMA, backend, j.task_key, j.task_id, j.run_id, j.job, j.index, j.results_dir,
                     j.submitted_at))

    def open_jobs(self, backend: str) -> dict[str, BatchJob]:
        """The tasks submitted and not yet collected, by task key."""
        found: dict[str, BatchJob] = {}
        for r in self.db.execute("SELECT * FROM batch_jobs WHERE backend=? AND closed_at IS NULL ORDER BY id",
                                 (backend,)):
            if r["schema"] != JOBS_SCHEMA:
                raise StoreError(f"{self.path} holds {backend} jobs of schema {r['schema']}; this matrix reads "
                                 f"{JOBS_SCHEMA}: collect them with the matrix version that submitted them")
            found[r["task_key"]] = BatchJob(r["task_key"], r["task_id"], r["run_id"], r["job"], r["idx"],
                                            r["results_dir"], r["submitted_at"])
        return found

    def close_jobs(self, backend: str, keys: Iterable[str], how: str) -> None:
        """Mark tasks collected ("collected", "lost", "cancelled"): they are no longer waited for."""
        keys = list(keys)
        if not keys:
            return
        now = time.time()
        with self.db:
            self.db.executemany("UPDATE batch_jobs SET closed_at=?, closed_how=? WHERE backend=? AND task_key=? "
                                "AND closed_at IS NULL", [(now, how, backend, k) for k in keys])
