"""A disk that fills while a run stores a repeat: the run stops with one line (exit 6) that says where the
repeat just measured is kept and how much room is needed; the next run imports it and measures only what
is missing. On a real full filesystem (a small tmpfs, as root); elsewhere, the one sqlite3 error is injected."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runner import matrix
from runner.base.exitcodes import Exit
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store, StoreFull

MATRIX = """
name: full
environments: [{name: cpu, backend: local, env: {OMP_NUM_THREADS: "1"}}]
axes: {model: [mlp], precision: [fp32], batch_size: [4], device: [cpu]}
run: {iterations: 2, warmup: 0, repeats: 3, timeout: 300}
"""


def count(db: Path, sql: str) -> int:
    try:
        con = sqlite3.connect(db, timeout=30)
        try:
            return int(con.execute(sql).fetchone()[0])
        finally:
            con.close()
    except sqlite3.OperationalError:
        return 0


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to the last byte."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        for block in (65536, 512, 1):
            try:
                while os.write(fd, b"\0" * block):
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_keeps_the_repeat_just_measured_and_the_next_run_stores_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; test_a_full_disk_at_the_sqlite_boundary covers the rest")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    try:
        m = tmp_path / "m.yaml"
        m.write_text(MATRIX)
        db = disk / "r.db"
        run = subprocess.Popen([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", str(db)],
                               cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 300
        while not (count(db, "SELECT COUNT(*) FROM results") >= 1 and count(db, "SELECT COUNT(*) FROM claims") == 1):
            assert time.time() < deadline and run.poll() is None, "the run never measured a second repeat"
            time.sleep(0.1)
        filler = fill(disk)  # while the second repeat is measured
        out, err = run.communicate(timeout=300)
        assert run.returncode == Exit.STORE, out + err
        line = err.strip().splitlines()[-1]
        assert "Traceback" not in err and line.startswith("error: cannot store a result in"), err
        journal = next((tmp_path / "state" / "matrix" / "journal").glob("r.db-*.journal"))
        assert f"the disk is full; the repeat just measured is kept in {journal}" in line
        assert "free at least " in line and f"on the filesystem of {disk}" in line and "(0 B free now)" in line
        kept = journal.read_text().splitlines()
        assert sum('"kind": "result"' in k for k in kept) == 1
        # Reading the store meanwhile says that results wait in the journal.
        ls = subprocess.run([sys.executable, "-m", "runner.cli", "ls", "--db", str(db)], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
        assert ls.returncode == 0 and f"kept in {journal}" in ls.stderr, ls.stderr

        filler.unlink()
        again = subprocess.run([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", str(db)],
                               cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stdout + again.stderr
        assert f"stored 1 result kept in {journal}" in again.stderr
        assert "1 of 3 repeats to run (2 already stored)" in again.stderr, again.stderr
        assert not journal.exists()
        with Store(db, readonly=True) as store:
            rows = list(store.rows(latest_only=False))
            runs = {r.run_id: r.status for r in store.runs()}
        assert sorted(Counter(r.repeat for r in rows).items()) == [(0, 1), (1, 1), (2, 1)], "nothing twice"
        assert {r.status for r in rows} == {"ok"}
        assert sorted(runs.values()) == ["complete", "failed"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_at_the_sqlite_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same promise where no filesystem can be filled: SQLite's own error, raised at the one insert."""
    (cell,) = matrix.parse(MATRIX).cells()
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    result = Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": 5.0}}, "", "", 1.0, 2.0)
    with Store(tmp_path / "r.db") as store:
        store.start_run("r1", None, "full", [])

        class Full(sqlite3.Connection):
            def execute(self, sql: str, *args: object) -> sqlite3.Cursor:  # type: ignore[override]
                if sql.startswith("INSERT INTO results"):
                    raise sqlite3.OperationalError("database or disk is full")
                return super().execute(sql, *args)  # type: ignore[arg-type]

        real = store.db
        store.db = sqlite3.connect(tmp_path / "r.db", factory=Full, isolation_level=None)
        with pytest.raises(StoreFull) as caught:
            store.record("r1", Task(cell, 0), result, remaining=2)
        store.db.close()
        store.db = real
        assert caught.value.kept == tmp_path / "r.db.journal"  # beside the store when there is room for it
        assert "is kept in" in str(caught.value) and "free at least 1.0 MiB" in str(caught.value)
        store.finish_run("r1", "failed")
    with Store(tmp_path / "r.db") as store:  # the next writer imports it
        (row,) = store.rows()
        assert row.run_id == "r1" and row.metrics == {"throughput": 5.0}
    assert not (tmp_path / "r.db.journal").exists()
