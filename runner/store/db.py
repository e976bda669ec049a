"""The store's database: opening (and creating, and migrating) it, its transactions, and SQLite's errors as one
line that says what to do. Every part of the store (runs.py, claims.py, results.py, ...) builds on `Database`."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from runner.base import safewrite
from runner.base.errors import DATABASE_ERRORS, BusyError, StoreError
from runner.domain.outcomes import Status
from runner.store.liveness import Heartbeat, Holder
from runner.store.schema import CAPTURES_DDL, DDL, DEFAULT_DB, STORE_SCHEMA, TABLES

BUSY_TIMEOUT_S = 30.0
# SQLite builds before 3.32 take at most 999 host parameters in one statement: an `IN (...)` list of more values
# is sent this many at a time.
IN_CHUNK = 500
NEWER = "it was written by a newer matrix; upgrade matrix"
if sqlite3.Error not in DATABASE_ERRORS:
    DATABASE_ERRORS.append(sqlite3.Error)  # the command line's boundary: an unguarded SQLite error is one line


def schema_refused(path: Path, holds: str, found: object, reads: int, then: str = NEWER) -> StoreError:
    """The one line for a store, or rows in it, of a schema this matrix does not read: what holds it (`holds`, e.g.
    "holds calibrations of"), the schema found and the one read, and what to do (`then`)."""
    return StoreError(f"{path} {holds} schema {found!r}; this matrix reads schema {reads}: {then}")


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
D = TypeVar("D", bound="Database")


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


class Database:
    """Opens (and creates) the database; every write is its own short transaction (BEGIN IMMEDIATE)."""

    def __init__(self, path: Path | str = DEFAULT_DB, create: bool = True, readonly: bool = False) -> None:
        """`readonly`: open an existing store for reading only; nothing is written, not even the schema, so a
        results file shared read-only (or on a read-only mount) reads as well as one's own."""
        self.path = Path(path)
        self.readonly = readonly
        self._heartbeats: dict[str, Heartbeat] = {}
        self._reaped: list[Holder] = []  # dead runs whose claims this object released, not yet said (holders.py)
        self._snapshot: tuple[int, int, bool] | None = None  # what an unlocked read saw at open
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a folder, not a result store: pass --db FILE (e.g. {self.path / 'matrix.db'})")
        self._refuse_planted()
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
        try:
            self._opened()
        except BaseException:
            self.db.close()
            raise

    def _opened(self) -> None:
        """What follows a successful open: the parts above may add to it (journaled.py imports a journal)."""

    # opening ----------------------------------------------------------------------------------
    def _refuse_planted(self) -> None:
        """SQLite opens a link at the store's name and writes into the file it names (another user's, a store of
        another project): a link is refused for writing (reading through one changes nothing). A FIFO or a device
        is refused either way: SQLite's open would wait on it for ever."""
        if not self.readonly and os.path.islink(self.path):
            raise StoreError(f"{self.path} is a symbolic link (to {os.readlink(self.path)}): matrix writes a store "
                             "only under its own name, never through a link; pass --db with the file it names, or "
                             "remove the link")
        try:
            what = safewrite.kind(os.stat(self.path))
        except OSError:
            return  # nothing there: created, or said missing below
        if what not in (None, "a folder"):  # a folder is said below
            raise StoreError(f"{self.path} is {what}, not a regular file: not a result store; pass --db FILE")

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
            _when_free(lambda: db.executescript(DDL))
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
        note(f"reading {self.path} as an immutable file ({why}, so SQLite cannot share its locks): it has no "
              "write-ahead log, so it is complete now, but a run writing to it while this command reads would not "
              "be seen")
        self._snapshot = _file_state(self.path)
        return sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=BUSY_TIMEOUT_S)

    def _check_schema(self) -> None:
        tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not TABLES <= tables:
            raise StoreError(f"{self.path} is not a matrix result store (no runs/results tables): pass --db with "
                             "the store `matrix run` wrote")
        found = self._schema_found()
        if found is None:
            if not self.readonly:
                self._migrate()
            return
        if found > STORE_SCHEMA:
            raise schema_refused(self.path, "has store", found, STORE_SCHEMA, f"{NEWER}, or start a new store with --db")
        if found < 1:
            raise schema_refused(self.path, "has store", found, STORE_SCHEMA,
                                 "use the matrix version that wrote it, or start a new store with --db")
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
            for statement in CAPTURES_DDL:
                self.db.execute(statement)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (str(STORE_SCHEMA),))

    def close(self) -> None:
        for beat in list(self._heartbeats.values()):
            beat.stop()
        self._heartbeats.clear()
        if self._snapshot is not None and _file_state(self.path) != self._snapshot:
            note(f"{self.path} changed while this command read it without locks: run the command again for "
                  "a consistent answer")
        self.db.close()

    def __enter__(self: D) -> D:
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


    # reading helpers the parts share ---------------------------------------------------------------
    def _each_in(self, sql: str, values: Iterable[Any]) -> Iterator[sqlite3.Row]:
        """The rows of `sql`, whose `IN ({marks})` takes every one of `values`, IN_CHUNK values at a time."""
        values = list(values)
        for i in range(0, len(values), IN_CHUNK):
            chunk = values[i:i + IN_CHUNK]
            yield from self.db.execute(sql.format(marks=",".join("?" * len(chunk))), chunk)

    def _has(self, table: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone() is not None


    def _status(self, value: str, row_id: int) -> Status:
        try:
            return Status(value)
        except ValueError:
            raise StoreError(f"{self.path}: result {row_id} has status {value!r}, which this matrix does not know "
                             f"(it knows {', '.join(s.value for s in Status)}): {NEWER}") from None


    def _latest(self, key: str, repeat: int) -> tuple[Status | None, int]:
        row = self.db.execute("SELECT id, status FROM results WHERE cell_key=? AND repeat=? ORDER BY id DESC LIMIT 1",
                              (key, repeat)).fetchone()
        return (None, 0) if row is None else (self._status(row[1], row[0]), row[0])



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


def checkpoint(path: Path) -> None:
    """Fold a store's write-ahead log into its file, so that the store is one file to copy or pack."""
    with closing(sqlite3.connect(path, timeout=BUSY_TIMEOUT_S)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def note(text: str) -> None:
    print(f"note: {text}", file=sys.stderr, flush=True)

