"""Results that move between stores: what an export reads, and an import's one transaction (docs/exchange.md).

Every store has an id (meta.store_id; a store that never had one is named by its first run, so a read-only store
has it too). A repeat keeps the id of the store that measured it and its row there (its origin) wherever it goes:
an imported repeat is stored under `<run id>@<store id>` and `<cell key>@<store id>`, so that repeats of two
machines never collide whatever their run ids, and a later `matrix run` here never takes another machine's
repeats for its own. The `imported` table keeps each imported row's origin, digest and provenance.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from runner.base.errors import StoreError
from runner.record.provenance import Provenance
from runner.store import Store
from runner.store.exchange_file import CONTENT_FIELDS, Bundle, digest
from runner.store.runs import own_store_id
from runner.store.schema import CAPTURES_SCHEMA, SCHEMA
from runner.store.schema import COLUMNS as _COLUMNS

IMPORTED_SCHEMA = 1
_IMPORTED_DDL = (
    "CREATE TABLE IF NOT EXISTS imported (result_id INTEGER PRIMARY KEY, schema INTEGER NOT NULL, "
    "origin_store TEXT NOT NULL, origin_row INTEGER NOT NULL, digest TEXT NOT NULL, provenance TEXT NOT NULL, "
    "source TEXT NOT NULL, imported_at REAL NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS imported_origin ON imported (origin_store, origin_row)",
)


@dataclass(frozen=True)
class Imported:
    """What one import did: repeats stored, repeats already there (the same content), runs added."""

    stored: int
    already: int
    runs: int


def store_id(store: Store) -> str | None:
    """This store's id: meta.store_id, else one made from its first own run (None: no run yet); runner/store/runs.py."""
    with store._guard():
        return own_store_id(store.db)


def _ensure_id(store: Store) -> str:
    found = store_id(store)
    mine = found or uuid.uuid4().hex[:12]
    store.db.execute("INSERT OR IGNORE INTO meta VALUES ('store_id', ?)", (mine,))
    return mine


def _has_imported(store: Store) -> bool:
    return store.db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='imported'").fetchone() is not None


def strip(name: str, origin: str) -> str:
    """A run id or cell key as its own store wrote it (without this store's `@<origin>`)."""
    suffix = f"@{origin}"
    return name[: -len(suffix)] if name.endswith(suffix) else name


def export_records(store: Store, run_ids: list[str] | None, environments: list[str] | None,
                   provenance: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The runs, captures and repeats (every stored row, oldest first) of the selection, as file records; a repeat
    imported here keeps its origin and provenance, one measured here gets this store's id and `provenance`."""
    with store._guard():
        mine = store_id(store) or "unknown"
        origins = _origins(store)
        rows = list(store.decoded(run_ids, latest_only=False, environments=environments))
        wanted = {r["run_id"] for r in rows}
        runs = [r for r in store.db.execute("SELECT * FROM runs ORDER BY started_at, run_id") if r["run_id"] in wanted]
        captures = store.captures(r["capture_id"] for r in rows)
    for run in runs:
        origin = run["run_id"].rpartition("@")[2] if "@" in run["run_id"] else mine
        yield {"kind": "run", "run_id": strip(run["run_id"], origin), "origin": origin,
               "started_at": run["started_at"], "finished_at": run["finished_at"], "matrix_name": run["matrix_name"],
               "matrix_path": run["matrix_path"], "host": run["host"], "status": run["status"],
               "argv": _json(run["argv"], [])}
    for cid in sorted(captures):
        yield {"kind": "capture", "id": cid, "content": json.dumps(captures[cid], sort_keys=True,
                                                                   separators=(",", ":"), default=str)}
    for r in rows:
        found = origins.get(r["id"])
        origin, row, prov = found if found else (mine, r["id"], {**provenance, "host": _host(r, provenance),
                                                                   "hardware": hardware(r.get("env") or {})})
        rec = {k: r.get(k) for k in CONTENT_FIELDS}
        rec["run_id"], rec["cell_key"] = strip(r["run_id"], origin), strip(r["cell_key"], origin)
        yield {"kind": "repeat", **rec, "origin": {"store": origin, "row": row}, "provenance": prov,
               "digest": digest(rec)}


def _host(row: dict[str, Any], provenance: dict[str, Any]) -> str:
    env = row.get("env") or {}
    return str(env.get("hostname") or provenance.get("host") or "")


def hardware(env: dict[str, Any]) -> str:
    """The device a repeat ran on, in words: the GPU's name, else the CPU's (with its count)."""
    if env.get("device_name") and env.get("device") != "cpu":
        return str(env["device_name"])
    cpu = str(env.get("cpu") or env.get("device_name") or env.get("device") or "")
    count = env.get("cpu_count")
    try:
        whole = count is not None and not isinstance(count, bool) and float(count).is_integer()
    except (TypeError, ValueError):
        whole = False
    return f"{cpu} ({int(float(count))} CPUs)" if cpu and whole else cpu  # type: ignore[arg-type]


def _json(text: Any, default: Any) -> Any:
    try:
        return json.loads(text) if text else default
    except (TypeError, ValueError):
        return default


def _origins(store: Store) -> dict[int, tuple[str, int, dict[str, Any]]]:
    if not _has_imported(store):
        return {}
    found = {}
    for r in store.db.execute("SELECT result_id, schema, origin_store, origin_row, provenance FROM imported"):
        if r[1] != IMPORTED_SCHEMA:
            raise StoreError(f"{store.path} holds imported rows of schema {r[1]}; this matrix reads {IMPORTED_SCHEMA}: "
                             "it was written by a newer matrix; upgrade matrix")
        found[int(r[0])] = (str(r[2]), int(r[3]), _json(r[4], {}))
    return found


def imports(store: Store) -> list[dict[str, Any]]:
    """What this store imported, one row per origin store and file: the origin's id, the hosts and hardware its
    repeats recorded, the stores they came by (an export of an import), the file as `matrix import` was given it,
    when it was imported, and its runs and repeats here. Oldest import first."""
    if not _has_imported(store):
        return []
    sql = ("SELECT i.origin_store, i.source, MIN(i.imported_at), MAX(i.imported_at), COUNT(DISTINCT r.run_id), "
           "COUNT(*), GROUP_CONCAT(i.provenance, char(10)) FROM imported i JOIN results r ON r.id = i.result_id "
           "GROUP BY i.origin_store, i.source ORDER BY MIN(i.imported_at), i.origin_store, i.source")
    out = []
    with store._guard():
        found = store.db.execute(sql).fetchall()
    for origin, source, first, last, runs, repeats, provs in found:
        hosts: dict[str, None] = {}
        hardware_: dict[str, None] = {}
        via: dict[str, None] = {}
        for text in dict.fromkeys(str(provs or "").split("\n")):
            p = _json(text, {})
            if isinstance(p, dict):
                hosts.update({str(p["host"]): None} if p.get("host") else {})
                hardware_.update({str(p["hardware"]): None} if p.get("hardware") else {})
                via.update(dict.fromkeys(str(v) for v in p.get("via") or [] if isinstance(p.get("via"), list)))
        out.append({"origin": str(origin), "hosts": sorted(hosts), "hardware": sorted(hardware_), "via": list(via),
                    "file": str(source), "first_imported": float(first), "last_imported": float(last),
                    "runs": int(runs), "repeats": int(repeats)})
    return out


def provenance(store: Store) -> dict[str, Provenance]:
    """Each imported machine's provenance by its store id, for the words a comparison's header shows."""
    out: dict[str, Provenance] = {}
    for row in imports(store):
        p = out.get(row["origin"], Provenance())
        firsts = [x for x in (p.first_imported, row["first_imported"]) if x == x]
        out[row["origin"]] = Provenance(tuple(dict.fromkeys([*p.files, row["file"]])), min(firsts),
                                        max(x for x in (p.last_imported, row["last_imported"]) if x == x),
                                        tuple(dict.fromkeys([*p.via, *row["via"]])))
    return out


def import_bundles(store: Store, bundles: list[tuple[Bundle, str]]) -> list[Imported]:
    """Merge files' repeats in one transaction: all of them, or none when one is refused. A repeat already here
    with the same digest is skipped; one whose origin is here with another digest is refused, never overwritten."""
    done = []
    with store._tx() as db:
        for statement in _IMPORTED_DDL:
            db.execute(statement)
        mine = _ensure_id(store)
        known = {(r[0], r[1]): r[2] for r in db.execute("SELECT origin_store, origin_row, digest FROM imported")}
        for bundle, source in bundles:
            done.append(_import_one(store, db, bundle, source, mine, known))
    return done


def _import_one(store: Store, db: Any, bundle: Bundle, source: str, mine: str,
                known: dict[tuple[str, int], str]) -> Imported:
    stored = already = runs = 0
    for run in bundle.runs:
        runs += _add_run(db, run, mine)
    now = time.time()
    sender = str((bundle.header.get("source") or {}).get("store") or "")
    for rec in bundle.repeats:
        origin, row = rec["origin"]["store"], rec["origin"]["row"]
        have = _own_digest(store, row) if origin == mine else known.get((origin, row))
        if have is not None or origin == mine:
            if have != rec["digest"]:
                raise StoreError(_conflict(store, source, origin, row, have is None))
            already += 1
            continue
        capture = rec.get("capture_id")
        if capture and capture in bundle.captures:
            db.execute("INSERT OR IGNORE INTO captures (id, schema, content, first_at) VALUES (?, ?, ?, ?)",
                       (capture, CAPTURES_SCHEMA, bundle.captures[capture], now))
        cur = db.execute(f"INSERT INTO results ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})",
                         _values(rec, origin))
        db.execute("INSERT INTO imported VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (cur.lastrowid, IMPORTED_SCHEMA, origin, row, rec["digest"],
                    json.dumps(_passed(rec["provenance"], origin, sender), sort_keys=True, default=str), source, now))
        known[(origin, row)] = rec["digest"]
        stored += 1
    return Imported(stored, already, runs)


def _passed(prov: dict[str, Any], origin: str, sender: str) -> dict[str, Any]:
    """A repeat's provenance with the store it came by added (`via`), when the file was exported by a store that
    imported it (an export of an import), so that where it passed is kept wherever it goes."""
    via = [str(v) for v in prov.get("via") or [] if isinstance(prov.get("via"), list)]
    if sender and sender != origin and sender not in via:
        return {**prov, "via": [*via, sender]}
    return prov


def _add_run(db: Any, run: dict[str, Any], mine: str) -> int:
    origin = str(run.get("origin") or "")
    if not origin:
        raise StoreError(f"run {run['run_id']} has no origin store: the file is not one `matrix export` wrote")
    run_id = run["run_id"] if origin == mine else f"{run['run_id']}@{origin}"
    if origin == mine and db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone() is None:
        # A run of this store comes back only as it left: one it never had would be added as its own, outside
        # the `@` namespace of imports (and, started last, be every later command's latest run).
        raise StoreError(f"run {run_id} says it was measured in this store (id {mine}), which has no such run: the "
                         "file belongs to another store that shares its id (one copied from the other?); nothing "
                         "was imported")
    cur = db.execute("INSERT OR IGNORE INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, "
                     "argv, host, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (run_id, SCHEMA, run["started_at"], run.get("finished_at"), run.get("matrix_path"),
                      run.get("matrix_name"), json.dumps(run.get("argv") or []), run.get("host"), run["status"]))
    return int(cur.rowcount or 0)


def _values(rec: dict[str, Any], origin: str) -> tuple[Any, ...]:
    row = {**rec, "schema": SCHEMA, "run_id": f"{rec['run_id']}@{origin}", "cell_key": f"{rec['cell_key']}@{origin}"}
    for col in ("tags", "params", "metrics", "env"):
        row[col] = json.dumps(row[col], default=str)
    row["raw"] = json.dumps(row["raw"], default=str) if row.get("raw") is not None else None
    return tuple(row.get(c) for c in _COLUMNS)


def _own_digest(store: Store, row_id: int) -> str | None:
    found = store.db.execute("SELECT * FROM results WHERE id=?", (row_id,)).fetchone()
    if found is None:
        return None
    d = store._decode(dict(found))
    return digest(d)


def _conflict(store: Store, source: str, origin: str, row: int, missing: bool) -> str:
    if missing:
        return (f"{source}: repeat {origin}:{row} says it was measured in this store ({store.path}), which has no "
                f"such row: the file belongs to another store that shares its id (one copied from the other?); "
                "nothing was imported")
    return (f"{source}: repeat {origin}:{row} is already in {store.path} with other content (results are never "
            f"overwritten); nothing was imported. Two stores share the id {origin}: was one copied from the other? "
            "Import their files into separate stores")
