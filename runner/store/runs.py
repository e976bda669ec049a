"""Runs: one row per `matrix run`, opened with its holder and a heartbeat, closed with its status."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runner.base.errors import ConfigError, StoreError
from runner.domain.outcomes import Status
from runner.store.db import StoreFull
from runner.store.holders import Holders
from runner.store.liveness import Heartbeat, this_process
from runner.store.schema import HOLDERS_SCHEMA, SCHEMA


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    started_at: float
    finished_at: float | None
    matrix_name: str | None
    matrix_path: str | None
    host: str | None
    status: str  # as `run_status` says it
    counts: dict[str, int]


# A repeat stored with one of these was planned and never ended: its run is not complete.
UNENDED = (Status.NOT_STARTED.value, Status.CANCELLED.value)


def run_status(stored: str, counts: Mapping[str, int], *, alive: bool | None = None, left: int = 0) -> str:
    """A run's status, the one answer `matrix ls`, the report and the site give: `complete` only when every repeat it
    planned ended (none stored `not_started` or `cancelled`, none `left` without a row: an environment that could
    not start, a repeat still waiting for its cell's calibration), else `incomplete`; `killed` when its process
    ended without closing it (`alive` False); otherwise as the run closed it (running, submitted, interrupted,
    failed). `matrix run` closes a run with this function's answer; every view asks it again of what is stored."""
    if stored == "running" and alive is False:
        return "killed"  # its process ended without closing the run (SIGKILL, a crash)
    if stored == "complete" and (left or any(counts.get(s) for s in UNENDED)):
        return "incomplete"
    return stored


def own_store_id(db: Any) -> str | None:
    """The store's id (docs/exchange.md): meta.store_id, else one made from its first own run (None: no run yet).
    The made one is written to meta by the next run this store starts (and by an import), so that it never changes:
    a later run whose clock reads earlier (a clock set back) does not make the store another machine."""
    row = db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    if row is not None:
        return str(row[0])
    first = db.execute("SELECT run_id, started_at FROM runs WHERE instr(run_id, '@') = 0 "
                       "ORDER BY started_at, run_id LIMIT 1").fetchone()
    if first is None:
        return None
    return hashlib.sha256(f"matrix-store:{first[0]}:{first[1]!r}".encode()).hexdigest()[:12]


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


class Runs(Holders):
    def start_run(self, run_id: str, matrix_path: str | None, matrix_name: str | None,
                  argv: list[str]) -> None:
        """Record the run and the process behind it; a heartbeat keeps it alive for other hosts until
        `finish_run`. Runs whose process died without finishing are marked `killed` first."""
        self.reap()
        me = this_process()
        now = time.time()
        with self._tx():
            known = own_store_id(self.db)  # before this run: its clock may read earlier than the first run's
            self.db.execute(
                "INSERT INTO runs (run_id, schema, started_at, matrix_path, matrix_name, argv, host, status)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'running')",
                (run_id, SCHEMA, now, matrix_path, matrix_name, json.dumps(argv), me.host))
            self.db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)",
                            (known or own_store_id(self.db),))
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
                h = holders.get(r["run_id"])
                alive = h.alive() if h is not None and r["status"] == "running" else None
                mine = counts.get(r["run_id"], {})
                found.append(RunInfo(r["run_id"], r["started_at"], r["finished_at"], r["matrix_name"],
                                     r["matrix_path"], r["host"], run_status(r["status"], mine, alive=alive), mine))
            return found

    def resolve_run(self, ref: str | None) -> str:
        """A run id from a prefix, or 'latest'/None for the newest run measured in this store: an imported run
        (`id@store`) started later on another machine's clock is not this store's latest; only when every run
        was imported is the newest import the latest. A prefix that names no run, or several, is a ConfigError."""
        runs = [r.run_id for r in self.runs()]
        if not runs:
            raise StoreError(f"no runs in {self.path} yet: run `matrix run` first")
        if ref in (None, "latest"):
            own = [r for r in runs if "@" not in r]
            return (own or runs)[-1]
        # A whole id is that run, even where it is the prefix of another (`id@store`, the same id imported back from
        # a store that shares it): otherwise no reference could name it.
        hits = [r for r in runs if r == ref] or [r for r in runs if r.startswith(ref or "")]
        if len(hits) != 1:  # a typo on the command line (exit 2), not a broken store
            shown = ", ".join(runs[-5:])
            raise ConfigError(f"run {ref!r} {'is ambiguous' if hits else 'not found'}; recent runs: {shown}")
        return hits[0]

