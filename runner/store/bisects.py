"""Bisect answers: what each `matrix bisect` concluded, kept so that the published site can show it beside the
histories it read (docs/decisions.md, "Bisect")."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Sequence
from typing import Any

from runner.base.errors import StoreError
from runner.store.db import Database, schema_refused
from runner.store.schema import BISECTS_SCHEMA


class Bisects(Database):
    def add_bisect(self, answer: dict[str, Any], cell_keys: Sequence[str], argv: Sequence[str], started_at: float,
                   finished_at: float) -> int:
        """Keep one answer (bisect's JSON document) and the cell key of each environment in its order."""
        text = json.dumps(answer, sort_keys=True, default=str, allow_nan=True)
        with self._tx() as db:
            cur = db.execute("INSERT INTO bisects (schema, started_at, finished_at, host, argv, metric, outcome, "
                             "cell_keys, answer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (BISECTS_SCHEMA, float(started_at), float(finished_at), socket.gethostname(),
                              json.dumps(list(argv)), str(answer.get("metric") or ""),
                              str(answer.get("outcome") or ""), json.dumps(list(cell_keys)), text))
            return int(cur.lastrowid or 0)

    def bisects(self) -> list[dict[str, Any]]:
        """Every stored answer, oldest first: {id, started_at, finished_at, host, argv, cell_keys, answer}. A store
        from before bisects were kept has none; a row this matrix cannot read is an error naming the store."""
        with self._guard():
            if not self._has("bisects"):
                return []
            rows = self.db.execute("SELECT id, schema, started_at, finished_at, host, argv, cell_keys, answer "
                                   "FROM bisects ORDER BY started_at, id").fetchall()
        out = []
        for r in rows:
            if r[1] != BISECTS_SCHEMA:
                raise schema_refused(self.path, "holds a bisect answer of", r[1], BISECTS_SCHEMA)
            try:
                answer, argv, keys = json.loads(r[7]), json.loads(r[5]), json.loads(r[6])
            except ValueError:
                raise StoreError(f"{self.path}: bisect answer {r[0]} is not readable JSON (the store is damaged)") \
                    from None
            if not (isinstance(answer, dict) and isinstance(argv, list) and isinstance(keys, list)
                    and all(isinstance(k, str) for k in keys) and all(_time(t) for t in (r[2], r[3]))
                    and _shaped(answer)):
                raise StoreError(f"{self.path}: bisect answer {r[0]} is not one `matrix bisect` wrote (the store is "
                                 "damaged)")
            out.append({"id": int(r[0]), "started_at": float(r[2]), "finished_at": float(r[3]),
                        "host": str(r[4] or ""), "argv": [str(a) for a in argv], "cell_keys": keys, "answer": answer})
        return out


def _time(t: Any) -> bool:
    """A stored epoch time a date can be made of (a damaged row's text, NaN or 1e30 cannot)."""
    return isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) and abs(t) < 1e11


def _shaped(answer: dict[str, Any]) -> bool:
    """The parts of bisect's document a reader walks have the types bisect writes (runner/report/bisect_answer.py)."""
    lists = all(isinstance(answer.get(k), list | type(None)) for k in ("environments", "decisions"))
    dicts = all(isinstance(answer.get(k), dict | type(None)) for k in ("culprit", "cost"))
    return lists and dicts
