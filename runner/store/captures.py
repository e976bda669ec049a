"""Captures: what an environment is made of, kept once per distinct content and referred to by its results."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runner.base.errors import StoreError
from runner.store.db import Database, schema_refused
from runner.store.schema import CAPTURES_SCHEMA


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



class Captures(Database):
    def _keep_capture(self, capture: Capture | None) -> None:
        if capture is not None:
            self.db.execute("INSERT OR IGNORE INTO captures (id, schema, content, first_at) VALUES (?, ?, ?, ?)",
                            (capture.id, CAPTURES_SCHEMA, capture.content, time.time()))


    def captures(self, ids: Iterable[str | None]) -> dict[str, dict[str, Any]]:
        """The captures (what an environment is made of) with these ids, decoded; an id the store does not hold
        (or a store of schema 1, read as it is) is left out."""
        wanted = sorted({i for i in ids if i})
        found: dict[str, dict[str, Any]] = {}
        with self._guard():
            if not wanted or not self._has("captures"):
                return found
            for row in self._each_in("SELECT id, schema, content FROM captures WHERE id IN ({marks})", wanted):
                if row[1] != CAPTURES_SCHEMA:
                    raise schema_refused(self.path, f"holds capture {row[0][:12]} of", row[1], CAPTURES_SCHEMA)
                try:
                    content = json.loads(row[2])
                except (TypeError, ValueError):
                    content = None
                if not isinstance(content, dict):
                    raise StoreError(f"{self.path} is damaged: capture {row[0][:12]} is not a JSON object; restore "
                                     "the store from a copy, or start a new store with --db")
                found[row[0]] = content
        return found

