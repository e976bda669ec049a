"""Calibrations: the measured iterations the first ok repeat of an `iterations: auto` cell chose."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from runner.domain.outcomes import Status
from runner.store.db import Database, schema_refused
from runner.store.schema import CALIBRATIONS_SCHEMA


class Calibrations(Database):
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
            for row in self._each_in("SELECT cell_key, iterations, schema FROM calibrations WHERE cell_key IN ({marks})",
                                     keys):
                if row[2] != CALIBRATIONS_SCHEMA:
                    raise schema_refused(self.path, "holds calibrations of", row[2], CALIBRATIONS_SCHEMA)
                found[row[0]] = int(row[1])
        return found


    def _calibrated(self, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM calibrations WHERE cell_key=?", (key,)).fetchone() is not None
