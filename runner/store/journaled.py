"""The store's side of the journal (journal.py): a result or a run's end that a full disk kept out is written
there, and imported by the next process that writes the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.base.errors import StoreError
from runner.store import journal
from runner.store.calibrations import Calibrations
from runner.store.captures import Capture, Captures
from runner.store.db import StoreFull, note
from runner.store.schema import COLUMNS, INSERT_RESULT


class Journaled(Captures, Calibrations):
    def _opened(self) -> None:
        if not self.readonly:
            self.import_journals()
            return
        waiting = journal.waiting(self.path)
        if waiting:
            note(f"{self.path}: results kept in {waiting[0]} after a full disk are not in the store yet; "
                  "the next `matrix run` on it stores them")

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
                    note(f"{path}: not imported into {self.path}: {why}; remove it if it is not yours")
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
                note(f"{path}: not imported into {self.path} ({e}); "
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
                            self.db.execute(INSERT_RESULT, tuple(row.get(c) if c == "capture_id" else row[c]
                                                                for c in COLUMNS))
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
            note(f"stored {n} result{'s' if n != 1 else ''} kept in {path} after a full disk")
        return n

    def _import_waiting(self) -> None:
        """Import a journal a full disk left (its results count before anything is claimed or stored)."""
        if journal.waiting(self.path):
            self.import_journals()

