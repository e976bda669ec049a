"""Lean reads for a reader of whole stores (the published site: 100,000 repeats on two cores): each stored row with
the few fields of its env and raw documents a history needs, read by SQLite's JSON functions instead of decoding
every document in Python. Rows come as named records, never as positional tuples."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runner.store.db import Database


@dataclass(frozen=True, slots=True)
class LeanRow:
    """One stored row (superseded ones included), lean: its columns, its params and metrics as the JSON text the
    store keeps, its raw document's `params` as JSON text (None: no raw, or none there), whether its raw names a
    workload's parser (a user's program ran), and the asked fields of its env in order (None: not recorded)."""

    id: int
    run_id: str
    cell_key: str
    repeat: int
    environment: str
    backend: str
    status: str
    started_at: float | None
    params: str | None
    metrics: str | None
    raw_params: str | None
    program: bool
    env: tuple[Any, ...]


class Lean(Database):
    def lean_rows(self, env_fields: Sequence[str]) -> Iterator[LeanRow]:
        """Every stored row in id order, lean (LeanRow). `env_fields`: the env document's fields to read (names of
        letters, digits and _). A row whose env or raw SQLite's JSON functions refuse (a NaN that Python's json
        wrote, a diverged loss) is read in Python instead, so that one of them never stops the reader."""
        fields = [f for f in env_fields if f.isidentifier()]
        if len(fields) != len(env_fields):
            raise ValueError(f"env fields are names of letters, digits and _: {list(env_fields)}")
        env = ", ".join(f"CASE WHEN json_valid(env) THEN json_extract(env, '$.{f}') END" for f in fields)
        sql = ("SELECT id, run_id, cell_key, repeat, environment, backend, status, started_at, params, metrics, "
               "CASE WHEN json_valid(raw) THEN json_extract(raw, '$.params') END AS raw_params, "
               "CASE WHEN json_valid(raw) THEN json_type(raw, '$.workload.parser') IS NOT NULL END AS program, "
               f"{env}{', ' if env else ''}json_valid(env) AND (raw IS NULL OR json_valid(raw)) AS readable "
               "FROM results ORDER BY id")
        with self._guard():
            rows = self.db.execute(sql).fetchall()
            for r in rows:
                if r["readable"]:
                    yield LeanRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r["raw_params"],
                                  bool(r["program"]), tuple(r[12:12 + len(fields)]))
                else:
                    yield self._lean_in_python(r, fields)

    def _lean_in_python(self, r: Any, fields: Sequence[str]) -> LeanRow:
        found = self.db.execute("SELECT env, raw FROM results WHERE id=?", (r["id"],)).fetchone()
        env, raw = (_object(found["env"]), _object(found["raw"])) if found else ({}, {})
        values = tuple(env.get(f) if not isinstance(env.get(f), dict | list) else None for f in fields)
        params = raw.get("params")
        workload = raw.get("workload")
        program = isinstance(workload, Mapping) and "parser" in workload
        return LeanRow(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9],
                       json.dumps(params) if isinstance(params, dict) else None, program, values)

    def first_raw_by_cell(self) -> dict[str, dict[str, Any]]:
        """Each cell key's first stored raw document ({} where it has none, or one that is not a JSON object): what
        is the same for every repeat of a definition (its run settings) read from one row of each."""
        sql = "SELECT cell_key, raw FROM results WHERE id IN (SELECT MIN(id) FROM results GROUP BY cell_key)"
        with self._guard():
            return {str(k): _object(raw) for k, raw in self.db.execute(sql)}


def _object(text: Any) -> dict[str, Any]:
    """A stored JSON object as Python reads it (NaN included), {} for anything else."""
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}
