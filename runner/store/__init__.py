"""The result store: SQLite, append-only, one row per repeat (docs/internals.md, "Store").

Several `matrix run` processes may use one store at once: each repeat is claimed in the store before it is
measured, and a claim dies with its holder (docs/internals.md, "Concurrent runs"). A result the store
cannot take (a full disk) is kept in a journal beside it and imported by the next writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from runner.errors import BusyError, StoreError
from runner.results import Outcome, Status
from runner.spec import Task
from runner.store import journal
from runner.store.liveness import HEARTBEAT_S, LEASE_S, MACHINE, Heartbeat, Holder, Process, this_process

# The store's schema (meta.schema). 2: the `captures` table and results.capture_id (what an environment is made
# of, kept once per distinct content); a store of schema 1 is migrated when it is first opened for writing,
# and read as it is when opened read-only.
STORE_SCHEMA = 2
# The row schema of `results` and `runs` rows (their `schema` column): unchanged by the captures (a new, nullable
# column), so rows of either store schema read alike.
SCHEMA = 1
CAPTURES_SCHEMA = 1
DEFAULT_DB = Path("results/matrix.db")
BUSY_TIMEOUT_S = 30.0

# captures: what an environment is made of (Python distributions, system packages, the variables that steer
# the libraries, torch's build configuration), one row per distinct content, addressed by its sha256; a
# result refers to its capture by results.capture_id. Append-only, like results.
_CAPTURES_DDL = (
    "CREATE TABLE IF NOT EXISTS captures (id TEXT PRIMARY KEY, schema INTEGER NOT NULL, content TEXT NOT NULL, "
    "first_at REAL NOT NULL)",
    "CREATE TRIGGER IF NOT EXISTS captures_no_update BEFORE UPDATE ON captures "
    "BEGIN SELECT RAISE(ABORT, 'captures are append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS captures_no_delete BEFORE DELETE ON captures "
    "BEGIN SELECT RAISE(ABORT, 'captures are append-only'); END",
)
_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL,
    matrix_path TEXT, matrix_name TEXT, argv TEXT, host TEXT, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, schema INTEGER NOT NULL, run_id TEXT NOT NULL,
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, environment TEXT NOT NULL, backend TEXT NOT NULL,
    tags TEXT NOT NULL, params TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
    metrics TEXT, env TEXT, raw TEXT, log_tail TEXT, started_at REAL, finished_at REAL, capture_id TEXT);
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
CREATE TABLE IF NOT EXISTS holders (
    run_id TEXT PRIMARY KEY, schema INTEGER NOT NULL, host TEXT NOT NULL, ident TEXT NOT NULL,
    pid INTEGER NOT NULL, pid_start TEXT, started_at REAL NOT NULL, heartbeat REAL NOT NULL, ended_at REAL);
CREATE TABLE IF NOT EXISTS claims (
    cell_key TEXT NOT NULL, repeat INTEGER NOT NULL, run_id TEXT NOT NULL, claimed_at REAL NOT NULL,
    machine TEXT, PRIMARY KEY (cell_key, repeat));
CREATE INDEX IF NOT EXISTS claims_run ON claims (run_id);
CREATE TABLE IF NOT EXISTS calibrations (
    cell_key TEXT PRIMARY KEY, schema INTEGER NOT NULL, iterations INTEGER NOT NULL, run_id TEXT NOT NULL,
    repeat INTEGER NOT NULL, iter_s REAL, calibrated_at REAL NOT NULL);
""" + "".join(f"{statement};\n" for statement in _CAPTURES_DDL)
# batch_jobs: tasks handed to a batch scheduler and not yet collected. A submission appends a row;
# collecting it sets closed_at (rows are never deleted). Its own schema, per row: a store written by
# an older matrix gains the table without a migration.
JOBS_SCHEMA = 1
# holders: the process behind each run, with its heartbeat; claims: the repeats a live run is measuring
# (deleted when stored or released). Coordination, not results: a store from before them gains them.
HOLDERS_SCHEMA = 1
# calibrations: the measured iterations the first ok repeat of an `iterations: auto` cell chose; every later repeat
# of that cell runs them (written with that repeat's result, in its transaction; never changed). Its own schema.
CALIBRATIONS_SCHEMA = 1
_TABLES = {"meta", "runs", "results"}


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


@dataclass(frozen=True)
class Claim:
    """The answer to a claim: `mine`, or held by a live `holder`, or neither (no longer needed). `taken`: the
    dead run whose claim this one took over. `machine`: the live run measuring on this machine now (a claim
    `here` waits for it, so that two measurements never share the processors)."""

    mine: bool
    holder: Holder | None = None
    taken: Holder | None = None
    machine: Holder | None = None


JSON_COLUMNS: dict[str, type] = {"tags": list, "params": dict, "metrics": dict, "env": dict, "raw": dict}


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


class StoreFull(StoreError):
    """The store's disk is full; `kept` says where the result that could not be stored went."""

    def __init__(self, message: str, kept: Path | None = None) -> None:
        super().__init__(message)
        self.kept = kept


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


T = TypeVar("T")


def _busy(e: sqlite3.Error) -> bool:
    name = getattr(e, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "is locked" in str(e)


def _when_free(step: Callable[[], T]) -> T:
    """`step` again while SQLite answers busy, until BUSY_TIMEOUT_S have passed since the first try. SQLite's
    busy handler waits out most locks, but some refusals come at once without it (a store being created or
    switched to WAL by another process at the same moment, a WAL index being rebuilt): two runs started together
    on a new store must both get in. A step that fails this way has changed nothing, so trying again is safe."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.01
    while True:
        try:
            return step()
        except sqlite3.OperationalError as e:
            if not _busy(e) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


class Store:
    """Opens (and creates) the database; every write is its own short transaction (BEGIN IMMEDIATE)."""

    def __init__(self, path: Path | str = DEFAULT_DB, create: bool = True, readonly: bool = False) -> None:
        """`readonly`: open an existing store for reading only; nothing is written, not even the schema, so a
        results file shared read-only (or on a read-only mount) reads as well as one's own."""
        self.path = Path(path)
        self.readonly = readonly
        self._heartbeats: dict[str, Heartbeat] = {}
        self._snapshot: tuple[int, int, bool] | None = None  # what an unlocked read saw at open
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder, not a result store: pass --db FILE (e.g. {self.path / 'matrix.db'})")
        if (readonly or not create) and not self.path.exists():
            raise StoreError(f"no result store at {self.path}: run `matrix run` first, or pass --db PATH")
        if not readonly:
            self._make_folder()
        try:
            with self._guard("open"):
                self.db = self._connect_readonly() if readonly else self._connect()
                self._check_schema()
        except BaseException:
            if getattr(self, "db", None) is not None:
                self.db.close()
            raise
        self.db.row_factory = sqlite3.Row
        if not readonly:
            try:
                self.import_journals()
            except BaseException:
                self.db.close()
                raise
        else:
            waiting = journal.waiting(self.path)
            if waiting:
                _note(f"{self.path}: results kept in {waiting[0]} after a full disk are not in the store yet; "
                      "the next `matrix run` on it stores them")

    # opening ----------------------------------------------------------------------------------
    def _make_folder(self) -> None:
        folder = self.path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            blocker = next((p for p in [folder, *folder.parents] if p.exists() and not p.is_dir()), folder)
            raise StoreError(f"cannot create the result store {self.path}: {blocker} is a file, not a folder; "
                             "pass --db with a path in a folder") from None
        except OSError as e:
            raise StoreError(f"cannot create the folder {folder} for the result store {self.path} "
                             f"({e.strerror}): pass --db with a path in a folder you can write") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise StoreError(f"cannot write the result store {self.path}: its folder {folder} is not writable "
                             "by this user (SQLite keeps a -wal and a -shm file beside the store); pass --db with "
                             "a path in a folder you can write")

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        try:
            tables = _when_free(lambda: {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")})
            if tables and "meta" not in tables:
                raise StoreError(f"{self.path} is an SQLite database but not a matrix result store (it holds "
                                 f"{', '.join(sorted(tables)[:5])}): pass --db with a new file")
            db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
            _when_free(lambda: db.execute("PRAGMA journal_mode=WAL"))
            db.execute("PRAGMA synchronous=NORMAL")
            _when_free(lambda: db.executescript(_DDL))
        except BaseException:
            db.close()
            raise
        return db

    def _connect_readonly(self) -> sqlite3.Connection:
        uri = self.path.resolve().as_uri()
        db = None
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            _when_free(lambda: db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall())  # type: ignore[union-attr]
            return db
        except sqlite3.OperationalError:
            if db is not None:
                db.close()
        # A WAL store whose -shm cannot be created here (its folder or filesystem is read-only): SQLite can
        # read it only as immutable, without locks and without its write-ahead log. That is right only when
        # nothing is in the log and nothing writes meanwhile: refuse the first, say the second, check at close.
        wal = Path(f"{self.path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreError(
                f"cannot read {self.path} safely: results of a recent run are still in its write-ahead log {wal}, "
                f"which only a process that may write in {self.path.parent} can read; ask the store's owner to run "
                f"`sqlite3 {self.path} 'PRAGMA wal_checkpoint(TRUNCATE)'`, or copy both files to a writable folder")
        why = ("its filesystem is read-only" if _readonly_fs(self.path)
               else f"its folder {self.path.parent} is not writable here")
        _note(f"reading {self.path} as an immutable file ({why}, so SQLite cannot share its locks): it has no "
              "write-ahead log, so it is complete now, but a run writing to it while this command reads would not "
              "be seen")
        self._snapshot = _file_state(self.path)
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=BUSY_TIMEOUT_S)

    def _check_schema(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not _TABLES <= tables:
            raise StoreError(f"{self.path} is not a matrix result store (no runs/results tables): pass --db with "
                             "the store `matrix run` wrote")
        found = self._schema_found()
        if found is None:
            if not self.readonly:
                self._migrate()
            return
        if found > STORE_SCHEMA:
            raise StoreError(f"{self.path} has store schema {found}; this matrix reads schema {STORE_SCHEMA}: it was "
                             "written by a newer matrix; upgrade matrix, or start a new store with --db")
        if found < 1:
            raise StoreError(f"{self.path} has store schema {found}; this matrix reads schema {STORE_SCHEMA}: use the "
                             "matrix version that wrote it, or start a new store with --db")
        if found < STORE_SCHEMA and not self.readonly:
            self._migrate()
        # Read-only, an older store is read as it is (it has no captures): nothing is written.

    def _schema_found(self) -> int | None:
        row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            return None
        try:
            return int(row[0])
        except (TypeError, ValueError):
            raise StoreError(f"{self.path} is damaged: its meta.schema is {row[0]!r}, not a number; restore it from "
                             "a copy, or start a new store with --db") from None

    def _migrate(self) -> None:
        """Bring a store of an older schema (or a new file) to STORE_SCHEMA in one transaction, under the write lock, so
        that two processes opening it at once migrate it once; rows are only added to, never rewritten.
        1 -> 2: the captures table and results.capture_id (NULL for the rows stored before)."""
        with self._tx():
            found = self._schema_found()
            if found is not None and found >= STORE_SCHEMA:
                return  # another process migrated it meanwhile
            columns = {r[1] for r in self.db.execute("PRAGMA table_info(results)")}
            if "capture_id" not in columns:
                self.db.execute("ALTER TABLE results ADD COLUMN capture_id TEXT")
            for statement in _CAPTURES_DDL:
                self.db.execute(statement)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(STORE_SCHEMA),))

    def close(self) -> None:
        for beat in list(self._heartbeats.values()):
            beat.stop()
        self._heartbeats.clear()
        if self._snapshot is not None and _file_state(self.path) != self._snapshot:
            _note(f"{self.path} changed while this command read it without locks: run the command again for "
                  "a consistent answer")
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # errors and transactions --------------------------------------------------------------------
    @contextmanager
    def _guard(self, doing: str = "read") -> Iterator[None]:
        """SQLite's errors as one StoreError (or BusyError) line that names the file and what to do."""
        try:
            yield
        except sqlite3.Error as e:
            raise self._error(e, doing) from e
        except OSError as e:
            raise StoreError(f"{self.path}: {e.strerror or e}") from e

    def _error(self, e: sqlite3.Error, doing: str) -> StoreError | BusyError:
        name = getattr(e, "sqlite_errorname", "") or ""
        text = str(e)
        if name.startswith("SQLITE_FULL") or "disk is full" in text:
            return StoreFull(f"cannot write {self.path}: the disk is full ({text}); {self.space_advice()}")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "is locked" in text:
            why = f"{name}: {text}" if name else text
            return BusyError(f"{self.path} stayed locked by another process for up to {BUSY_TIMEOUT_S:.0f} s ({why}): "
                             "another matrix (or sqlite3) holds a long write; try again when it is done")
        if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
            return StoreError(f"{self.path} is damaged or not a matrix result store ({text}): restore it from a copy "
                              f"(`sqlite3 {self.path} .recover` may save its rows), or start a new store with --db")
        if self.readonly and doing != "open" and ("readonly" in text or name.startswith("SQLITE_READONLY")):
            return StoreError(f"{self.path} was opened read-only: this command does not write the store")
        if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_IOERR")) or any(
                w in text for w in ("readonly", "unable to open", "disk I/O error", "not authorized")):
            what = "read" if self.readonly else "write"
            return StoreError(f"cannot {what} {self.path} ({text}): the file and its folder {self.path.parent} must "
                              f"be {what}able by this user (SQLite keeps a -wal and a -shm file beside the store); "
                              "pass --db with a path you can " + what)
        return StoreError(f"{self.path}: {text} (while trying to {doing} it)")

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction that takes the write lock at its start, so its reads and writes are one
        step that no other process interleaves with."""
        with self._guard("write"):
            _when_free(lambda: self.db.execute("BEGIN IMMEDIATE"))
            done = False
            try:
                yield self.db
                self.db.execute("COMMIT")
                done = True
            finally:
                if not done and self.db.in_transaction:
                    try:
                        self.db.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass

    def space_advice(self, rows: int = 1, row_bytes: int = 0) -> str:
        """How much room the store needs to take `rows` more results, and how much there is."""
        try:
            free = shutil.disk_usage(self.path.parent).free
        except OSError:
            free = -1
        per_row = max(row_bytes, self._mean_row_bytes())
        # The rows themselves, their index entries, and room for SQLite's write-ahead log to grow.
        need = max(1 << 20, 3 * per_row * max(rows, 1) + 256 * 4096)
        have = f" ({_size(free)} free now)" if free >= 0 else ""
        return f"free at least {_size(need)} on the filesystem of {self.path.parent}{have}"

    def _mean_row_bytes(self) -> int:
        try:
            row = self.db.execute("SELECT AVG(LENGTH(metrics) + LENGTH(env) + LENGTH(raw) + LENGTH(log_tail) "
                                  "+ LENGTH(params)) FROM (SELECT * FROM results ORDER BY id DESC LIMIT 20)").fetchone()
            return int(row[0] or 0) + 512
        except sqlite3.Error:
            return 16 * 1024

    # runs -----------------------------------------------------------------------------------
    def start_run(self, run_id: str, matrix_path: str | None, matrix_name: str | None,
                  argv: list[str]) -> None:
        """Record the run and the process behind it; a heartbeat keeps it alive for other hosts until
        `finish_run`. Runs whose process died without finishing are marked `killed` first."""
        self.reap()
        me = this_process()
        now = time.time()
        with self._tx():
            self.db.execute(
                "INSERT INTO runs (run_id, schema, started_at, matrix_path, matrix_name, argv, host, status)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
                (run_id, SCHEMA, now, matrix_path, matrix_name, json.dumps(argv), me.host))
            self.db.execute(
                "INSERT OR REPLACE INTO holders (run_id, schema, host, ident, pid, pid_start, started_at, heartbeat)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, HOLDERS_SCHEMA, me.host, me.ident, me.pid, me.start, now, now))
        beat = Heartbeat(self.path, run_id)
        beat.start()
        self._heartbeats[run_id] = beat

    def finish_run(self, run_id: str, status: str) -> None:
        """Close the run: its status, its end, and every claim it still holds is released."""
        beat = self._heartbeats.pop(run_id, None)
        if beat:
            beat.stop()
        now = time.time()
        try:
            with self._tx():
                self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE run_id=?", (now, status, run_id))
                self.db.execute("UPDATE holders SET ended_at=? WHERE run_id=? AND ended_at IS NULL", (now, run_id))
                self.db.execute("DELETE FROM claims WHERE run_id=?", (run_id,))
        except StoreFull as e:
            kept = self._keep({"kind": "run_end", "run_id": run_id, "status": status, "finished_at": now})
            raise StoreFull(str(e), kept) from e

    def runs(self) -> list[RunInfo]:
        with self._guard():
            counts: dict[str, dict[str, int]] = {}
            for row in self.db.execute("SELECT run_id, status, COUNT(*) FROM results GROUP BY run_id, status"):
                counts.setdefault(row[0], {})[row[1]] = row[2]
            holders = self._holders()
            found = []
            for r in self.db.execute("SELECT * FROM runs ORDER BY started_at"):
                status = r["status"]
                h = holders.get(r["run_id"])
                if status == "running" and h is not None and not h.alive():
                    status = "killed"  # its process ended without closing the run (SIGKILL, a crash)
                found.append(RunInfo(r["run_id"], r["started_at"], r["finished_at"], r["matrix_name"],
                                     r["matrix_path"], r["host"], status, counts.get(r["run_id"], {})))
            return found

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

    # holders and claims ---------------------------------------------------------------------------
    def _has(self, table: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None

    def _holders(self, where: str = "", args: tuple[Any, ...] = ()) -> dict[str, Holder]:
        if self.readonly and not self._has("holders"):
            return {}
        out = {}
        for r in self.db.execute(f"SELECT * FROM holders{where}", args):
            if r["schema"] != HOLDERS_SCHEMA:
                raise StoreError(f"{self.path} holds runs of holder schema {r['schema']}; this matrix reads "
                                 f"{HOLDERS_SCHEMA}: it was written by a newer matrix; upgrade matrix")
            out[r["run_id"]] = Holder(r["run_id"], r["host"], r["ident"], r["pid"], r["pid_start"], r["started_at"],
                                      r["heartbeat"], r["ended_at"])
        return out

    def reap(self) -> list[Holder]:
        """Runs whose process died without finishing: import what they kept in a journal, mark them `killed`
        and release their claims. Returns them."""
        if self.readonly:
            return []
        with self._guard():
            dead = [h for h in self._holders(" WHERE ended_at IS NULL").values() if not h.alive()]
        if dead:
            self._import_waiting()
            with self._tx():
                for h in dead:
                    self._reap_in_tx(h)
        return dead

    def _reap_in_tx(self, h: Holder) -> None:
        self.db.execute("UPDATE runs SET status='killed', finished_at=COALESCE(finished_at, ?) "
                        "WHERE run_id=? AND status='running'", (h.heartbeat, h.run_id))
        self.db.execute("UPDATE holders SET ended_at=? WHERE run_id=? AND ended_at IS NULL", (time.time(), h.run_id))
        self.db.execute("DELETE FROM claims WHERE run_id=?", (h.run_id,))

    def _claim_holder(self, key: str, repeat: int) -> Holder | None:
        row = self.db.execute("SELECT run_id FROM claims WHERE cell_key=? AND repeat=?", (key, repeat)).fetchone()
        if row is None:
            return None
        h = self._holders(" WHERE run_id=?", (row[0],)).get(row[0])
        # A claim without its holder row cannot be checked: treat it as its holder's gone.
        return h or Holder(row[0], "", "", 0, None, 0.0, 0.0, 0.0)

    def _latest(self, key: str, repeat: int) -> tuple[Status | None, int]:
        row = self.db.execute("SELECT id, status FROM results WHERE cell_key=? AND repeat=? ORDER BY id DESC LIMIT 1",
                              (key, repeat)).fetchone()
        return (None, 0) if row is None else (self._status(row[1], row[0]), row[0])

    def claim(self, run_id: str, tasks: Iterable[Task], needs: Callable[[Status | None, int], bool],
              here: bool = False) -> dict[str, Claim]:
        """Claim repeats for `run_id`, in one transaction: a repeat is this run's when it already holds it, or
        when no live run holds it and `needs(current status, its row id)` says it is still to be measured.
        A claim of a dead run is taken over. A repeat of an `iterations: auto` cell that has no calibrated count
        yet waits (held) while another live run holds a repeat of that cell. `here`: the repeats are measured on this machine, which measures
        one repeat at a time: while another live run measures here, the answer is `machine` (try again).
        Returns each task's answer by task id."""
        answers: dict[str, Claim] = {}
        tasks = list(tasks)
        if not tasks:
            return answers
        self._import_waiting()
        now = time.time()
        with self._tx():
            for task in tasks:
                key, r = task.cell.key, task.repeat
                h = self._claim_holder(key, r)
                if h is not None and h.run_id == run_id:
                    answers[task.id] = Claim(True)
                    continue
                if h is not None and h.alive(now):
                    answers[task.id] = Claim(False, h)
                    continue
                if h is not None:
                    self._reap_in_tx(h)
                status, row_id = self._latest(key, r)
                if not needs(status, row_id):
                    answers[task.id] = Claim(False)
                    continue
                calibrating = self._calibrating_elsewhere(key, run_id, now) if task.cell.run.calibrated else None
                if calibrating is not None:
                    answers[task.id] = Claim(False, calibrating)
                    continue
                busy = self._measuring_here(run_id, now) if here else None
                if busy is not None:
                    answers[task.id] = Claim(False, machine=busy)
                    continue
                self.db.execute("INSERT OR REPLACE INTO claims (cell_key, repeat, run_id, claimed_at, machine) "
                                "VALUES (?, ?, ?, ?, ?)", (key, r, run_id, now, MACHINE if here else None))
                answers[task.id] = Claim(True, taken=h)
        return answers

    def _measuring_here(self, run_id: str, now: float) -> Holder | None:
        """The live run, other than `run_id`, that measures a repeat on this machine now (dead ones are reaped)."""
        for (other,) in self.db.execute("SELECT DISTINCT run_id FROM claims WHERE machine=? AND run_id<>?",
                                        (MACHINE, run_id)).fetchall():
            h = self._holders(" WHERE run_id=?", (other,)).get(other)
            if h is not None and h.alive(now):
                return h
            self._reap_in_tx(h or Holder(other, "", "", 0, None, 0.0, 0.0, 0.0))
        return None

    def _import_waiting(self) -> None:
        """Import a journal a full disk left (its results count before anything is claimed or stored)."""
        if journal.waiting(self.path):
            self.import_journals()

    def claims(self, keys: Iterable[str], run_id: str | None = None) -> dict[tuple[str, int], Holder]:
        """The repeats of these cells that a live run other than `run_id` is measuring, with that run."""
        keys = list(keys)
        found: dict[tuple[str, int], Holder] = {}
        with self._guard():
            if self.readonly and not self._has("claims"):
                return found
            holders = {k: h for k, h in self._holders(" WHERE ended_at IS NULL").items() if h.alive()}
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                for row in self.db.execute(f"SELECT cell_key, repeat, run_id FROM claims WHERE cell_key IN "
                                           f"({','.join('?' * len(chunk))})", chunk):
                    if row[2] != run_id and row[2] in holders:
                        found[(row[0], row[1])] = holders[row[2]]
        return found

    def release(self, run_id: str, tasks: Iterable[Task] = ()) -> None:
        """Give back claims this run holds and will not measure."""
        with self._tx():
            self.db.executemany("DELETE FROM claims WHERE cell_key=? AND repeat=? AND run_id=?",
                                [(t.cell.key, t.repeat, run_id) for t in tasks])

    # results --------------------------------------------------------------------------------
    def _values(self, run_id: str, task: Task, outcome: Outcome) -> tuple[tuple[Any, ...], Capture | None]:
        """The row of a result, and its capture (the bench's env.software, which the row refers to by id)."""
        cell = task.cell
        env, raw, capture = split_capture(outcome.env, outcome.result)
        return (SCHEMA, run_id, cell.key, task.repeat, cell.env_name, cell.environment.backend,
                json.dumps(cell.environment.tags), json.dumps(dict(cell.params)), outcome.status.value,
                outcome.reason, json.dumps(outcome.metrics), json.dumps(env, default=str),
                json.dumps(raw, default=str) if raw is not None else None, outcome.log_tail,
                outcome.started_at, outcome.finished_at, capture.id if capture else None), capture

    _INSERT = ("INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
               " status, reason, metrics, env, raw, log_tail, started_at, finished_at, capture_id)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

    def _keep_capture(self, capture: Capture | None) -> None:
        if capture is not None:
            self.db.execute("INSERT OR IGNORE INTO captures (id, schema, content, first_at) VALUES (?, ?, ?, ?)",
                            (capture.id, CAPTURES_SCHEMA, capture.content, time.time()))

    def add(self, run_id: str, task: Task, outcome: Outcome) -> None:
        """Append a result, whoever holds its claim (see `record` for a run's results)."""
        self.record(run_id, task, outcome)

    def record(self, run_id: str, task: Task, outcome: Outcome,
               needs: Callable[[Status | None, int], bool] | None = None, remaining: int = 0) -> bool:
        """Store a run's result and release its claim, in one transaction. With `needs`, a result whose
        repeat this run did not hold is stored only when no live run holds it and `needs` still wants it;
        returns whether it was stored. On a full disk the result is kept in a journal (`StoreFull` says
        where, and how much room the store needs for it and `remaining` more)."""
        values, capture = self._values(run_id, task, outcome)
        key, r = task.cell.key, task.repeat
        try:
            self._import_waiting()
            with self._tx():
                if needs is not None:
                    h = self._claim_holder(key, r)
                    if h is not None and h.run_id != run_id:
                        if h.alive():
                            return False
                        self._reap_in_tx(h)
                        h = None
                    if h is None:
                        status, row_id = self._latest(key, r)
                        if not needs(status, row_id):
                            return False
                self._keep_capture(capture)
                self.db.execute(self._INSERT, values)
                self._calibrated_in_tx(key, r, run_id, outcome.status.value, outcome.metrics)
                self.db.execute("DELETE FROM claims WHERE cell_key=? AND repeat=? AND run_id=?", (key, r, run_id))
            return True
        except StoreFull as e:
            row = dict(zip(_COLUMNS, values, strict=True))
            kept = self._keep({"kind": "result", "row": row,
                               **({"capture": {"id": capture.id, "content": capture.content}} if capture else {})})
            size = sum(len(v) for v in values if isinstance(v, str))
            where = (f"the repeat just measured is kept in {kept} and the next `matrix run` on this store "
                     "stores it" if kept else "the repeat just measured could not be kept anywhere (no room for "
                     "a journal either) and must be measured again")
            raise StoreFull(f"cannot store a result in {self.path}: the disk is full; {where}; "
                            f"{self.space_advice(remaining + 1, size)}, then run the same command again",
                            kept) from e

    # calibrations -------------------------------------------------------------------------------------
    def _calibrated_in_tx(self, key: str, repeat: int, run_id: str, status: str, metrics: dict[str, Any]) -> None:
        """Keep the count an ok calibrating repeat chose, unless the cell has one already (the first stays)."""
        cal = metrics.get("calibration") if status == Status.OK.value else None
        if not isinstance(cal, dict):
            return
        n = cal.get("iterations")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return
        per = cal.get("iter_s")
        self.db.execute("INSERT OR IGNORE INTO calibrations (cell_key, schema, iterations, run_id, repeat, iter_s, "
                        "calibrated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (key, CALIBRATIONS_SCHEMA, n, run_id, repeat,
                         float(per) if isinstance(per, int | float) else None, time.time()))

    def calibrations(self, keys: Iterable[str]) -> dict[str, int]:
        """The measured iterations calibrated for these cells (`iterations: auto`), by cell key."""
        keys = list(keys)
        found: dict[str, int] = {}
        with self._guard():
            if not keys or (self.readonly and not self._has("calibrations")):
                return found
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                for row in self.db.execute(f"SELECT cell_key, iterations, schema FROM calibrations WHERE cell_key IN "
                                           f"({','.join('?' * len(chunk))})", chunk):
                    if row[2] != CALIBRATIONS_SCHEMA:
                        raise StoreError(f"{self.path} holds calibrations of schema {row[2]}; this matrix reads "
                                         f"{CALIBRATIONS_SCHEMA}: it was written by a newer matrix; upgrade matrix")
                    found[row[0]] = int(row[1])
        return found

    def _calibrating_elsewhere(self, key: str, run_id: str, now: float) -> Holder | None:
        """The live run, other than `run_id`, holding a repeat of an uncalibrated cell: it may be calibrating it,
        so no other repeat of that cell starts before its count is known (dead holders are reaped)."""
        if self.db.execute("SELECT 1 FROM calibrations WHERE cell_key=?", (key,)).fetchone() is not None:
            return None
        for (other,) in self.db.execute("SELECT DISTINCT run_id FROM claims WHERE cell_key=? AND run_id<>?",
                                        (key, run_id)).fetchall():
            h = self._holders(" WHERE run_id=?", (other,)).get(other)
            if h is not None and h.alive(now):
                return h
            self._reap_in_tx(h or Holder(other, "", "", 0, None, 0.0, 0.0, 0.0))
        return None

    def last_id(self) -> int:
        """The newest result's id: rows after it were stored later."""
        with self._guard():
            row = self.db.execute("SELECT MAX(id) FROM results").fetchone()
        return int(row[0] or 0)

    def _status(self, value: str, row_id: int) -> Status:
        try:
            return Status(value)
        except ValueError:
            raise StoreError(f"{self.path}: result {row_id} has status {value!r}, which this matrix does not know "
                             f"(it knows {', '.join(s.value for s in Status)}): it was written by a newer matrix; "
                             "upgrade matrix") from None

    def latest(self, keys: Iterable[str]) -> dict[tuple[str, int], tuple[Status, int]]:
        """The current status of every stored repeat of these cells, with its row id (the newest row wins)."""
        keys = list(keys)
        found: dict[tuple[str, int], tuple[Status, int]] = {}
        with self._guard():
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                marks = ",".join("?" * len(chunk))
                for row in self.db.execute(
                        f"SELECT cell_key, repeat, status, id FROM results WHERE id IN (SELECT MAX(id) FROM results"
                        f" WHERE cell_key IN ({marks}) GROUP BY cell_key, repeat)", chunk):
                    found[(row[0], row[1])] = (self._status(row[2], row[3]), row[3])
        return found

    def latest_statuses(self, keys: Iterable[str]) -> dict[tuple[str, int], Status]:
        """The current status of every stored repeat of these cells (the newest row wins)."""
        return {k: s for k, (s, _) in self.latest(keys).items()}

    def rows(self, run_ids: Iterable[str] | None = None, latest_only: bool = True, *,
             keys: Iterable[str] | None = None, environments: Iterable[str] | None = None
             ) -> Iterator[dict[str, Any]]:
        """Result rows with JSON decoded; by default only each repeat's newest row. `keys`, `environments`: only
        the rows of these cells, of these environment names."""
        where: list[str] = []
        args: list[Any] = []
        for column, values in (("run_id", run_ids), ("cell_key", keys), ("environment", environments)):
            if values is not None:
                chosen = list(values) or [""]
                where.append(f"{column} IN ({','.join('?' * len(chosen))})")
                args += chosen
        scope = f" WHERE {' AND '.join(where)}" if where else ""
        if latest_only:
            sql = f"SELECT * FROM results WHERE id IN (SELECT MAX(id) FROM results{scope} GROUP BY cell_key, repeat)"
        else:
            sql = "SELECT * FROM results" + scope
        with self._guard(), closing(self.db.execute(sql + " ORDER BY id", args)) as cur:
            for row in cur:
                yield self._decode(dict(row))

    def _decode(self, d: dict[str, Any]) -> dict[str, Any]:
        if d["schema"] != SCHEMA:
            raise StoreError(f"{self.path}: result {d['id']} has row schema {d['schema']!r}; this matrix reads "
                             f"{SCHEMA}: it was written by another matrix version; use that version")
        d.setdefault("capture_id", None)  # a store of schema 1 read as it is
        self._status(d["status"], d["id"])
        for col, kind in JSON_COLUMNS.items():
            try:
                d[col] = json.loads(d[col]) if d[col] is not None else None
            except (TypeError, ValueError):
                raise StoreError(f"{self.path} is damaged: column {col} of result {d['id']} is not JSON; restore "
                                 "the store from a copy, or start a new store with --db") from None
            if d[col] is not None and not isinstance(d[col], kind):
                raise StoreError(f"{self.path} is damaged: column {col} of result {d['id']} is a "
                                 f"{type(d[col]).__name__}, not a {kind.__name__}; restore the store from a copy, or "
                                 "start a new store with --db")
        return d

    def environments(self) -> list[str]:
        """The environment names that have results, in the order they were first stored."""
        with self._guard():
            return [r[0] for r in self.db.execute("SELECT environment FROM results GROUP BY environment "
                                                  "ORDER BY MIN(id)")]

    def captures(self, ids: Iterable[str | None]) -> dict[str, dict[str, Any]]:
        """The captures (what an environment is made of) with these ids, decoded; an id the store does not hold
        (or a store of schema 1, read as it is) is left out."""
        wanted = sorted({i for i in ids if i})
        found: dict[str, dict[str, Any]] = {}
        with self._guard():
            if not wanted or not self._has("captures"):
                return found
            for i in range(0, len(wanted), 500):
                chunk = wanted[i:i + 500]
                for row in self.db.execute(f"SELECT id, schema, content FROM captures WHERE id IN "
                                           f"({','.join('?' * len(chunk))})", chunk):
                    if row[1] != CAPTURES_SCHEMA:
                        raise StoreError(f"{self.path}: capture {row[0][:12]} has schema {row[1]!r}; this matrix reads "
                                         f"{CAPTURES_SCHEMA}: it was written by a newer matrix; upgrade matrix")
                    try:
                        content = json.loads(row[2])
                    except (TypeError, ValueError):
                        content = None
                    if not isinstance(content, dict):
                        raise StoreError(f"{self.path} is damaged: capture {row[0][:12]} is not a JSON object; restore "
                                         "the store from a copy, or start a new store with --db")
                    found[row[0]] = content
        return found

    # the journal of results a full disk kept out -------------------------------------------------------
    def journal_paths(self) -> list[Path]:
        return journal.paths(self.path)

    def _keep(self, entry: dict[str, Any]) -> Path | None:
        return journal.keep(self.path, json.dumps({"journal": journal.JOURNAL_SCHEMA, "db": str(self.path.resolve()),
                                                   **entry}, default=str) + "\n")

    def import_journals(self) -> int:
        """Store what a full disk kept out (results, a run's end), once; a journal is removed when its
        entries are in the store. Returns how many results were imported."""
        imported = 0
        for path in self.journal_paths():
            why = journal.refused(path, self.path) if path.exists() or path.is_symlink() else "absent"
            if why is not None:
                if why != "absent":  # someone else may have written it: never imported, and it blocks nothing
                    _note(f"{path}: not imported into {self.path}: {why}; remove it if it is not yours")
                continue
            try:
                with journal.locked(path, "r+") as f:
                    entries = [json.loads(line) for line in f.read().splitlines() if line.strip()]
                    imported += self._import(path, entries)
                    path.unlink()
            except FileNotFoundError:
                continue  # another process imported it meanwhile
            except StoreFull:
                raise
            except (OSError, ValueError, KeyError, TypeError, AttributeError, StoreError) as e:
                aside = journal.set_aside(path)
                _note(f"{path}: not imported into {self.path} ({e}); "
                      + (f"moved to {aside}" if aside else "remove it if it does not belong here"))
        return imported

    def _import(self, path: Path, entries: list[dict[str, Any]]) -> int:
        n = 0
        mine = str(self.path.resolve())
        try:
            with self._tx():
                for e in entries:
                    if e.get("journal") != journal.JOURNAL_SCHEMA or e.get("db") != mine:
                        raise StoreError(f"{path} holds an entry of another store or journal version "
                                         f"({e.get('db')}, journal {e.get('journal')}): move it away")
                    if e["kind"] == "result":
                        row = e["row"]
                        if self.db.execute("SELECT 1 FROM results WHERE run_id=? AND cell_key=? AND repeat=? AND "
                                           "started_at IS ? AND finished_at IS ?",
                                           (row["run_id"], row["cell_key"], row["repeat"], row["started_at"],
                                            row["finished_at"])).fetchone() is None:
                            if isinstance(e.get("capture"), dict):
                                self._keep_capture(Capture(str(e["capture"]["id"]), str(e["capture"]["content"])))
                            # A journal written before captures has no capture_id: NULL, as in the rows before.
                            self.db.execute(self._INSERT, tuple(row.get(c) if c == "capture_id" else row[c]
                                                                for c in _COLUMNS))
                            metrics = json.loads(row["metrics"]) if row.get("metrics") else {}
                            self._calibrated_in_tx(row["cell_key"], row["repeat"], row["run_id"], row["status"],
                                                   metrics if isinstance(metrics, dict) else {})
                            n += 1
                        self.db.execute("DELETE FROM claims WHERE cell_key=? AND repeat=? AND run_id=?",
                                        (row["cell_key"], row["repeat"], row["run_id"]))
                    elif e["kind"] == "run_end":
                        self.db.execute("UPDATE runs SET finished_at=?, status=? WHERE run_id=? AND status='running'",
                                        (e["finished_at"], e["status"], e["run_id"]))
                        self.db.execute("UPDATE holders SET ended_at=? WHERE run_id=? AND ended_at IS NULL",
                                        (e["finished_at"], e["run_id"]))
                        self.db.execute("DELETE FROM claims WHERE run_id=?", (e["run_id"],))
        except StoreFull as err:
            raise StoreFull(f"cannot import the {len(entries)} entries kept in {path} into {self.path}: the disk is "
                            f"still full; {self.space_advice(len(entries))}", path) from err
        if n:
            _note(f"stored {n} result{'s' if n != 1 else ''} kept in {path} after a full disk")
        return n

    # batch jobs -----------------------------------------------------------------------------
    def add_jobs(self, backend: str, jobs: Iterable[BatchJob]) -> None:
        """Remember submitted tasks; an open row of the same task is closed as superseded."""
        now = time.time()
        with self._tx():
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
        with self._guard():
            if self.readonly and not self._has("batch_jobs"):
                return found
            for r in self.db.execute("SELECT * FROM batch_jobs WHERE backend=? AND closed_at IS NULL ORDER BY id",
                                     (backend,)):
                if r["schema"] != JOBS_SCHEMA:
                    raise StoreError(f"{self.path} holds {backend} jobs of schema {r['schema']}; this matrix reads "
                                     f"{JOBS_SCHEMA}: collect them with the matrix version that submitted them")
                found[r["task_key"]] = BatchJob(r["task_key"], r["task_id"], r["run_id"], r["job"], r["idx"],
                                                r["results_dir"], r["submitted_at"])
        return found

    def open_task_ids(self) -> set[str]:
        """The task ids (`Task.id`) of every batch job not yet collected, whatever its backend."""
        with self._guard():
            if self.readonly and not self._has("batch_jobs"):
                return set()
            return {r[0] for r in self.db.execute("SELECT task_id FROM batch_jobs WHERE closed_at IS NULL")}

    def close_jobs(self, backend: str, keys: Iterable[str], how: str) -> None:
        """Mark tasks collected ("collected", "lost", "cancelled"): they are no longer waited for."""
        keys = list(keys)
        if not keys:
            return
        now = time.time()
        with self._tx():
            self.db.executemany("UPDATE batch_jobs SET closed_at=?, closed_how=? WHERE backend=? AND task_key=? "
                                "AND closed_at IS NULL", [(now, how, backend, k) for k in keys])


_COLUMNS = ("schema", "run_id", "cell_key", "repeat", "environment", "backend", "tags", "params", "status",
            "reason", "metrics", "env", "raw", "log_tail", "started_at", "finished_at", "capture_id")


@dataclass(frozen=True)
class Capture:
    """What an environment is made of (the bench's env.software), as the store keeps it: canonical JSON and
    its sha256, so that every repeat of one environment refers to one row."""

    id: str
    content: str


def split_capture(env: dict[str, Any], raw: dict[str, Any] | None
                  ) -> tuple[dict[str, Any], dict[str, Any] | None, Capture | None]:
    """A result's env and bench result without `software`, and that software as a Capture (None without)."""
    software = env.pop("software", None)
    if raw is not None and isinstance(raw.get("env"), dict) and "software" in raw["env"]:
        raw = {**raw, "env": {k: v for k, v in raw["env"].items() if k != "software"}}
    if not isinstance(software, dict) or not software:
        return env, raw, None
    text = json.dumps(software, sort_keys=True, separators=(",", ":"), default=str)
    return env, raw, Capture(hashlib.sha256(text.encode()).hexdigest(), text)


def _file_state(path: Path) -> tuple[int, int, bool]:
    try:
        st = path.stat()
        return (st.st_size, st.st_mtime_ns, Path(f"{path}-wal").exists())
    except OSError:
        return (-1, -1, False)


def _readonly_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


def _note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)


__all__ = ["DEFAULT_DB", "HEARTBEAT_S", "LEASE_S", "MACHINE", "SCHEMA", "STORE_SCHEMA", "BatchJob", "Capture", "Claim",
           "Holder", "Process", "RunInfo", "Store", "StoreFull", "new_run_id", "split_capture", "this_process"]
