"""Several runs started at the same moment on a store that does not exist yet must all get in. SQLite refuses
some of them at once, without waiting in its busy handler, while another process creates the file and switches
it to WAL; before the store retried those refusals about one start in eight of six processes failed with a
BusyError (exit 7) although nothing held the store for long (seen in CI: two `matrix bisect` started together)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from runner.store import Store
from runner.store import db as store_module

PROCESSES = 6
TRIALS = 30


def _open(path: Path, barrier: Any, results: Any) -> None:
    barrier.wait()
    try:
        with Store(path) as st:
            st.db.execute("SELECT count(*) FROM results").fetchone()
        results.put("ok")
    except Exception as e:  # noqa: BLE001 - what a run would print is the point
        results.put(f"{type(e).__name__}: {e}")


def test_runs_opening_a_new_store_at_the_same_moment_all_get_in(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    failures = []
    for trial in range(TRIALS):
        path = tmp_path / f"s{trial}.db"
        barrier, results = ctx.Barrier(PROCESSES), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(path, barrier, results)) for _ in range(PROCESSES)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        said = [results.get(timeout=10) for _ in procs]
        failures += [s for s in said if s != "ok"]
    assert not failures, failures[:3]


def test_a_refusal_that_lasts_is_still_a_busy_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """The retry is bounded: a lock that never goes is reported, not waited on forever."""
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.2)
    calls = []

    def locked() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store_module._when_free(locked)
    assert len(calls) > 1


def test_other_errors_are_not_retried() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: results")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        store_module._when_free(broken)
    assert calls == [1]
