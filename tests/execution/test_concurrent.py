"""Two real `matrix run` processes on one store: they share the work through claims, a SIGKILLed one strands
nothing, and a resume measures exactly what is missing. Real PyTorch, real processes, real SQLite."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from runner.store import Store

MATRIX = """
name: shared
environments: [{name: cpu, backend: local, env: {OMP_NUM_THREADS: "1"}}]
axes: {model: [mlp], precision: [fp32], batch_size: [4, 8, 16], device: [cpu]}
run: {iterations: 2, warmup: 0, repeats: REPEATS, timeout: 300}
"""


def start(tmp_path: Path, m: Path, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def query(db: Path, sql: str, *args: object) -> list[tuple[object, ...]]:
    try:
        con = sqlite3.connect(db, timeout=30)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return []  # not created yet


def run_of(db: Path, pid: int) -> str | None:
    found = query(db, "SELECT run_id FROM holders WHERE pid=?", pid)
    return str(found[0][0]) if found else None


def wait_until(what: str, check: object, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting until {what}")


def measured(db: Path) -> Counter[tuple[str, int]]:
    """How many rows each (cell, repeat) has: a repeat measured twice has two."""
    with Store(db, readonly=True) as store:
        return Counter((r.cell_key, r.repeat) for r in store.rows(latest_only=False))


def test_two_runs_share_the_work_and_a_killed_one_strands_nothing(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(MATRIX.replace("REPEATS", "3").replace("batch_size: [4, 8, 16]", "batch_size: [4, 8]"))
    db = tmp_path / "r.db"
    a = start(tmp_path, m, db)
    wait_until("run A holds a claim", lambda: run_of(db, a.pid) is not None)
    b = start(tmp_path, m, db)
    try:
        run_a = run_of(db, a.pid)
        # Kill A while it measures a repeat (it holds a claim) after it has stored at least one.
        wait_until("B has started and A has stored one repeat and measures another", lambda: (
            run_of(db, b.pid) is not None
            and query(db, "SELECT COUNT(*) FROM results WHERE run_id=?", run_a)[0][0] >= 1
            and query(db, "SELECT COUNT(*) FROM claims WHERE run_id=?", run_a)[0][0] == 1))
        claimed = query(db, "SELECT cell_key, repeat FROM claims WHERE run_id=?", run_a)
        a.send_signal(signal.SIGKILL)
        a.communicate(timeout=60)
        out, err = b.communicate(timeout=400)
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    assert b.returncode == 0, out + err
    rows = measured(db)
    assert len(rows) == 6 and set(rows.values()) == {1}, f"each repeat measured exactly once: {rows}"
    with Store(db, readonly=True) as store:
        by_run = Counter(r.run_id for r in store.rows())
        runs = {r.run_id: r.status for r in store.runs()}
        (key, repeat), = claimed
        (taken,) = [r for r in store.rows() if r.cell_key == key and r.repeat == repeat]
        spans = sorted((float(r.started_at), float(r.finished_at), r.run_id) for r in store.rows())
    run_b = next(r for r in runs if r != run_a)
    # One machine measures one repeat at a time: the two runs took turns, no measurement overlapped another.
    for (_, end, _), (start_next, _, _) in zip(spans, spans[1:], strict=False):
        assert start_next >= end, f"measurements overlap: {spans}"
    assert by_run[run_a] >= 1 and by_run[run_b] >= 1, f"both runs measured: {by_run}"
    assert taken.run_id == run_b and taken.status == "ok", "the repeat A held when it died was measured by B"
    assert runs == {run_a: "killed", run_b: "complete"}
    assert f"run {run_a} (pid {a.pid} on " in err and "ended without storing its repeats" in err, err
    listing = subprocess.run([sys.executable, "-m", "runner.cli", "ls", "--db", str(db)], cwd=tmp_path,
                             capture_output=True, text=True, check=True).stdout
    assert "killed" in listing and "running" not in listing


def test_a_killed_run_is_resumed_with_exactly_the_missing_repeats(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(MATRIX.replace("REPEATS", "2").replace("batch_size: [4, 8, 16]", "batch_size: [4, 8]"))
    db = tmp_path / "r.db"
    a = start(tmp_path, m, db)
    try:
        wait_until("A stored a repeat and holds the next", lambda: (
            query(db, "SELECT COUNT(*) FROM results")[0][0] >= 1 if query(db, "SELECT 1 FROM results LIMIT 1")
            else False) and bool(query(db, "SELECT 1 FROM claims")))
        os.kill(a.pid, signal.SIGKILL)
        a.communicate(timeout=60)
    finally:
        if a.poll() is None:
            a.kill()
    before = measured(db)
    assert 1 <= len(before) < 4 and query(db, "SELECT COUNT(*) FROM claims")[0][0] == 1, "the dead run's claim stays"
    resume = subprocess.run([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", str(db)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=400)
    assert resume.returncode == 0, resume.stdout + resume.stderr
    assert f"{4 - len(before)} of 4 repeats to run ({len(before)} already stored)" in resume.stderr
    after = measured(db)
    assert len(after) == 4 and set(after.values()) == {1}, after
    assert query(db, "SELECT COUNT(*) FROM claims")[0][0] == 0, "no claim is left behind"
