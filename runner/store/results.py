"""Results: one append-only row per measured repeat, stored with the release of its claim."""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from typing import TYPE_CHECKING, Any

from runner.base.errors import StoreError
from runner.domain.outcomes import Outcome, Status
from runner.record.stored import HERE, Origin, StoredRepeat, document, origin_of
from runner.store.captures import Capture, split_capture
from runner.store.claims import Claims
from runner.store.db import StoreFull, schema_refused
from runner.store.schema import COLUMNS, INSERT_RESULT, JSON_COLUMNS, SCHEMA

STATUS_VALUES = frozenset(s.value for s in Status)
# The documents many rows store alike (a cell's params, an environment's env, a cell's settings in raw), read once
# per distinct text by `rows()`, at most this many kept.
SHARED_COLUMNS = frozenset(("params", "env", "raw"))
SHARED_MOST = 20_000
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # the decoder is the context it reads
try:  # a C reader, four times faster on the metrics' lists of numbers; json alone where it is not installed
    import orjson as _orjson
except ImportError:  # pragma: no cover - a dependency (pyproject.toml)
    _orjson = None  # type: ignore[assignment]
_LARGE = 2.0 ** 63  # orjson reads an integer beyond 64 bits as a float; json.loads keeps it exact


def _json(text: str) -> Any:
    """A stored JSON document, exactly as json.loads reads it (the store reads four a repeat, 40,000 for a
    10,000-repeat report). orjson reads it where it reads it the same: it refuses NaN and Infinity (which Python's
    json writes for a non-finite figure), lone surrogates and numbers beyond a double, and reads an integer beyond 64
    bits as a float; json reads the refused ones, and any document orjson gave a number of 2**63 or more. Without
    orjson, json's own scanner (without json.loads's checks around it), json.loads for anything unusual (white space
    around it, trailing text: an error it names)."""
    if _orjson is not None:
        try:
            value = _orjson.loads(text)
        except _orjson.JSONDecodeError:
            return json.loads(text)
        return value if _exact(value) else json.loads(text)
    try:
        value, end = _SCAN(text, 0)
    except (StopIteration, TypeError):
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _exact(value: Any) -> bool:
    """Whether a document orjson read holds no float of magnitude 2**63 or more: only there could it have read an
    integer json.loads keeps exact (a float written that large reads the same either way)."""
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        v = pop()
        kind = type(v)
        if kind is float:
            if not -_LARGE < v < _LARGE:
                return False
        elif kind is dict:
            extend(v.values())
        elif kind is list:
            extend(v)
    return True

if TYPE_CHECKING:
    from runner.domain.cells import Task


class Results(Claims):
    def _values(self, run_id: str, task: Task, outcome: Outcome) -> tuple[tuple[Any, ...], Capture | None]:
        """The row of a result, and its capture (the bench's env.software, which the row refers to by id)."""
        cell = task.cell
        env, raw, capture = split_capture(outcome.env, outcome.result)
        return (SCHEMA, run_id, cell.key, task.repeat, cell.env_name, cell.environment.backend,
                json.dumps(cell.environment.tags), json.dumps(dict(cell.params)), outcome.status.value,
                outcome.reason, json.dumps(outcome.metrics), json.dumps(env, default=str),
                json.dumps(raw, default=str) if raw is not None else None, outcome.log_tail,
                outcome.started_at, outcome.finished_at, capture.id if capture else None), capture


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
                        if self._live_or_reap(h):
                            return False
                        h = None
                    if h is None:
                        status, row_id = self._latest(key, r)
                        if not needs(status, row_id):
                            return False
                self._keep_capture(capture)
                self.db.execute(INSERT_RESULT, values)
                self._calibrated_in_tx(key, r, run_id, outcome.status.value, outcome.metrics)
                self.db.execute("DELETE FROM claims WHERE cell_key=? AND repeat=? AND run_id=?", (key, r, run_id))
            return True
        except StoreFull as e:
            row = dict(zip(COLUMNS, values, strict=True))
            kept = self._keep({"kind": "result", "row": row,
                               **({"capture": {"id": capture.id, "content": capture.content}} if capture else {})})
            size = sum(len(v) for v in values if isinstance(v, str))
            where = (f"the repeat just measured is kept in {kept} and the next `matrix run` on this store "
                     "stores it" if kept else "the repeat just measured could not be kept anywhere (no room for "
                     "a journal either) and must be measured again")
            raise StoreFull(f"cannot store a result in {self.path}: the disk is full; {where}; "
                            f"{self.space_advice(remaining + 1, size)}, then run the same command again",
                            kept) from e

    def last_id(self) -> int:
        """The newest result's id: rows after it were stored later."""
        with self._guard():
            row = self.db.execute("SELECT MAX(id) FROM results").fetchone()
        return int(row[0] or 0)


    def latest(self, keys: Iterable[str]) -> dict[tuple[str, int], tuple[Status, int]]:
        """The current status of every stored repeat of these cells, with its row id (the newest row wins)."""
        keys = list(keys)
        found: dict[tuple[str, int], tuple[Status, int]] = {}
        with self._guard():
            newest = self._newest(" WHERE cell_key IN ({marks})")
            for row in self._each_in(f"SELECT cell_key, repeat, status, id FROM results WHERE id IN ({newest})", keys):
                found[(row[0], row[1])] = (self._status(row[2], row[3]), row[3])
        return found

    def latest_statuses(self, keys: Iterable[str]) -> dict[tuple[str, int], Status]:
        """The current status of every stored repeat of these cells (the newest row wins)."""
        return {k: s for k, (s, _) in self.latest(keys).items()}

    def rows(self, run_ids: Iterable[str] | None = None, latest_only: bool = True, *,
             keys: Iterable[str] | None = None, environments: Iterable[str] | None = None
             ) -> Iterator[StoredRepeat]:
        """The stored repeats, typed (runner/record/stored.py), each with its origin (an imported one's from the
        `imported` table); by default only each repeat's newest row. `keys`, `environments`: only the rows of these
        cells, of these environment names. A document stored alike in many rows (a cell's params, an environment's
        env) is decoded once and shared: the record's documents are read-only."""
        shared: dict[tuple[str, str], Any] = {}
        for d in self.decoded(run_ids, latest_only, keys=keys, environments=environments, shared=shared):
            yield self._repeat(d)

    def decoded(self, run_ids: Iterable[str] | None = None, latest_only: bool = True, *,
                keys: Iterable[str] | None = None, environments: Iterable[str] | None = None,
                shared: dict[tuple[str, str], Any] | None = None) -> Iterator[dict[str, Any]]:
        """The store's own reading of `results` rows, JSON decoded (with the `imported` table's columns where it has
        them): what `rows()` types, and what an export writes to its file format. `shared`: the read-only documents
        of SHARED_COLUMNS decoded so far, by their text (`rows()`; an export's rows are its own to change)."""
        where: list[str] = []
        args: list[Any] = []
        for column, values in (("run_id", run_ids), ("cell_key", keys), ("environment", environments)):
            if values is not None:
                chosen = list(values) or [""]
                where.append(f"{column} IN ({','.join('?' * len(chosen))})")
                args += chosen
        scope = f" WHERE {' AND '.join(where)}" if where else ""
        with self._guard():
            sql = f"SELECT * FROM results WHERE id IN ({self._newest(scope)})" if latest_only else \
                "SELECT * FROM results" + scope
            if self._has_table("imported"):  # an imported repeat's origin, file and time (runner/store/exchange.py)
                sql = (f"SELECT r.*, i.origin_store AS _origin, i.origin_row AS _origin_row, i.source AS _source, "
                       f"i.imported_at AS _imported_at FROM ({sql}) r LEFT JOIN imported i ON i.result_id = r.id")
            with closing(self.db.execute(sql + " ORDER BY id", args)) as cur:
                for row in cur:
                    yield self._decode(dict(row), shared)

    def _newest(self, scope: str) -> str:
        """SQL for the id of each repeat's newest row among `results{scope}`. Newest in the order of the store that
        measured it: this store's own rows by id; an imported repeat's rows by their row in the measuring store (all
        rows of an imported cell key `<key>@<store>` come from that store), never by when their files arrived here:
        an older export imported after a newer one does not bring back a repeat its re-run replaced."""
        if not self._has_table("imported"):
            return f"SELECT MAX(id) FROM results{scope} GROUP BY cell_key, repeat"
        # SQLite's bare column beside one max(): the id of the row holding it (0.09 s for 100,000 imported rows).
        return ("SELECT id FROM (SELECT results.id AS id, MAX(COALESCE(imported.origin_row, results.id)) FROM results "
                f"LEFT JOIN imported ON imported.result_id = results.id{scope} GROUP BY cell_key, repeat)")

    def _has_table(self, name: str) -> bool:
        return self.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)).fetchone() is not None

    @staticmethod
    def _repeat(d: dict[str, Any]) -> StoredRepeat:
        """A decoded row as the typed record everything above the store reads."""
        origin = d.get("_origin")
        if origin is not None:
            where = Origin(str(origin), d.get("_origin_row"), str(d.get("_source") or ""), d.get("_imported_at"))
        else:
            where = Origin(origin_of(d["run_id"])) if "@" in d["run_id"] else HERE
        return StoredRepeat(int(d["id"]), d["run_id"], d["cell_key"], int(d["repeat"]), d["environment"], d["backend"],
                            tuple(str(t) for t in d["tags"] or ()), document(d["params"]), d["status"],
                            d["reason"] or "", document(d["metrics"]), document(d["env"]),
                            document(d["raw"]) if d["raw"] is not None else None, d["log_tail"] or "",
                            d["started_at"], d["finished_at"], d["capture_id"], where)

    def _decode(self, d: dict[str, Any], shared: dict[tuple[str, str], Any] | None = None) -> dict[str, Any]:
        if d["schema"] != SCHEMA:
            raise schema_refused(self.path, f"holds result {d['id']} of row", d["schema"], SCHEMA,
                                 "it was written by another matrix version; use that version")
        d.setdefault("capture_id", None)  # a store of schema 1 read as it is
        if d["status"] not in STATUS_VALUES:
            self._status(d["status"], d["id"])  # refused in one line
        for col, kind in JSON_COLUMNS.items():
            text = d[col]
            if shared is not None and col in SHARED_COLUMNS and text is not None:
                found = shared.get((col, text))
                if found is not None:
                    d[col] = found
                    continue
            try:
                d[col] = _json(text) if text is not None else None
            except (TypeError, ValueError):
                raise StoreError(f"{self.path} is damaged: column {col} of result {d['id']} is not JSON; restore "
                                 "the store from a copy, or start a new store with --db") from None
            if d[col] is not None and not isinstance(d[col], kind):
                raise StoreError(f"{self.path} is damaged: column {col} of result {d['id']} is a "
                                 f"{type(d[col]).__name__}, not a {kind.__name__}; restore the store from a copy, or "
                                 "start a new store with --db")
            if shared is not None and col in SHARED_COLUMNS and len(shared) < SHARED_MOST:
                d[col] = shared[(col, text)] = document(d[col])
        return d

    def environments(self) -> list[str]:
        """The environment names that have results, in the order they were first stored."""
        with self._guard():
            return [r[0] for r in self.db.execute("SELECT environment FROM results GROUP BY environment "
                                                  "ORDER BY MIN(id)")]

