"""Holders: the process behind each run. A run whose process died without finishing is reaped: marked
`killed`, its claims released. "Find a live holder, else reap it" is written here once."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from runner.store.db import schema_refused
from runner.store.journaled import Journaled
from runner.store.liveness import Holder
from runner.store.schema import HOLDERS_SCHEMA


def _gone(run_id: str) -> Holder:
    """A run with no holder row: it cannot be checked, so it counts as gone."""
    return Holder(run_id, "", "", 0, None, 0.0, 0.0, 0.0)


class Holders(Journaled):
    def _holders(self, where: str = "", args: tuple[Any, ...] = ()) -> dict[str, Holder]:
        if self.readonly and not self._has("holders"):
            return {}
        out = {}
        for r in self.db.execute(f"SELECT * FROM holders{where}", args):
            if r["schema"] != HOLDERS_SCHEMA:
                raise schema_refused(self.path, "holds runs of holder", r["schema"], HOLDERS_SCHEMA)
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
        released = self.db.execute("DELETE FROM claims WHERE run_id=?", (h.run_id,)).rowcount
        if released > 0:  # whichever check met it first: the run that takes those repeats over says so
            self._reaped.append(h)

    def take_reaped(self) -> list[Holder]:
        """The dead runs this store object released claims of since the last call (each once): a run that measures
        their repeats says they ended without storing them, whichever of its checks found them dead."""
        found, self._reaped = self._reaped, []
        return found


    def _live_or_reap(self, h: Holder, now: float | None = None) -> bool:
        """Whether `h` still runs; a dead holder is reaped here (inside the caller's transaction)."""
        if h.alive(now):
            return True
        self._reap_in_tx(h)
        return False

    def _live_holder(self, run_ids: Iterable[str], now: float) -> Holder | None:
        """The first of these runs that is alive; the dead ones met on the way are reaped."""
        for other in run_ids:
            h = self._holders(" WHERE run_id=?", (other,)).get(other) or _gone(other)
            if self._live_or_reap(h, now):
                return h
        return None

    def _claim_holder(self, key: str, repeat: int) -> Holder | None:
        row = self.db.execute("SELECT run_id FROM claims WHERE cell_key=? AND repeat=?", (key, repeat)).fetchone()
        if row is None:
            return None
        h = self._holders(" WHERE run_id=?", (row[0],)).get(row[0])
        # A claim without its holder row cannot be checked: treat it as its holder's gone.
        return h or _gone(row[0])

