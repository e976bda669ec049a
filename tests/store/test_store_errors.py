"""A store that is damaged, unknown, unwritable or misplaced is one line and exit status 6 from every
command that opens it, never a traceback; a fuzz test mutates a real store file at random."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from runner import cli, matrix
from runner.base.exitcodes import Exit
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store

TEXT = """
name: errs
environments: [{name: a, backend: local, tags: [x]}, {name: b, backend: local}]
axes: {model: [mlp], precision: [fp32, bf16], batch_size: [8, 16], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 3}
"""
M = matrix.parse(TEXT)


def build(path: Path) -> Path:
    """A store with every table in use: runs, results of realistic size, a batch job."""
    rng = random.Random(1)
    with Store(path) as store:
        store.start_run("20260101-000000-aaaaaa", "m.yaml", "errs", ["run"])
        for cell in M.cells():
            for r in range(3):
                tput = rng.uniform(50, 150)
                result = {"schema": 1, "status": "ok", "metrics": {"throughput": tput, "iter_times":
                          [rng.random() for _ in range(50)], "peak_mem_allocated": 1 << 20},
                          "env": {"torch": "2.13.0", "hostname": "h"}}
                store.add("20260101-000000-aaaaaa", Task(cell, r),
                          Outcome(Status.OK, result, "log line\n" * 40, "", 1.0, 2.0, {"backend": "local"}))
        store.finish_run("20260101-000000-aaaaaa", "complete")
    con = sqlite3.connect(path)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    return path


def matrix_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """The CLI in this process, through its error boundary (main), as a user runs it."""
    old = sys.argv
    sys.argv = ["matrix", *args]
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = old
    out = capsys.readouterr()
    return code, out.out + out.err


def commands(db: Path, tmp_path: Path) -> list[list[str]]:
    m = tmp_path / "m.yaml"
    m.write_text(TEXT + "references: [{match: {model: mlp}, throughput: '>= 1'}]\n")
    return [["ls", "--db", str(db)], ["show", "--db", str(db)], ["compare", "a", "b", "--db", str(db)],
            ["report", "--db", str(db), "--format", "json", "--out", str(tmp_path / "rep")],
            ["plan", "-m", str(m), "--db", str(db)], ["check", "-m", str(m), "--db", str(db)],
            ["run", "-m", str(m), "--db", str(db), "--only", "model=mlp"]]


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "garbage":
        path.write_bytes(bytes(random.Random(2).randrange(256) for _ in range(len(data))))
    elif how == "truncated":
        path.write_bytes(data[:len(data) // 2 + 100])
    elif how == "pages zeroed":
        path.write_bytes(data[:4096] + bytes(len(data) - 8192) + data[-4096:])
    else:
        con = sqlite3.connect(path)
        sql = {"schema not a number": "UPDATE meta SET value='one' WHERE key='schema'",
               "newer schema": "UPDATE meta SET value='99' WHERE key='schema'",
               "unknown status": "DROP TRIGGER results_no_update; UPDATE results SET status='paused' WHERE id=3",
               "damaged json": "DROP TRIGGER results_no_update; UPDATE results SET metrics='{\"thr' WHERE id=2"}[how]
        con.executescript(sql)
        con.commit()
        con.close()


@pytest.mark.parametrize("how", ["garbage", "truncated", "pages zeroed", "schema not a number", "newer schema",
                                 "unknown status", "damaged json"])
def test_a_damaged_or_unknown_store_is_one_line_and_exit_6(tmp_path: Path, how: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    db = build(tmp_path / "r.db")
    damage(db, how)
    for args in commands(db, tmp_path):
        code, said = matrix_cli(capsys, *args)
        if how in ("unknown status", "damaged json") and args[0] in ("ls", "plan", "run"):
            # They read statuses at most, not the rows' JSON: they may answer, or say what is wrong.
            assert code in (0, Exit.STORE) and "Traceback" not in said, said
            continue
        assert code == Exit.STORE, f"matrix {' '.join(args)} with a store {how}: exit {code}\n{said}"
        assert "Traceback" not in said and said.count("error:") == 1 and str(db) in said, said
    if how == "newer schema":
        assert "written by a newer matrix; upgrade matrix" in said
    if how == "unknown status":
        assert "status 'paused', which this matrix does not know" in said


def test_misplaced_or_unwritable_stores_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(TEXT)
    afile = tmp_path / "a-file"
    afile.write_text("x")
    code, said = matrix_cli(capsys, "run", "-m", str(m), "--db", str(afile / "sub" / "r.db"))
    assert code == Exit.STORE and f"{afile} is a file, not a folder" in said and "Traceback" not in said
    code, said = matrix_cli(capsys, "run", "-m", str(m), "--db", str(tmp_path))
    assert code == Exit.STORE and "is a folder, not a result store" in said
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE notes (x)")
    con.commit()
    con.close()
    code, said = matrix_cli(capsys, "run", "-m", str(m), "--db", str(other))
    assert code == Exit.STORE and "not a matrix result store (it holds notes)" in said
    con = sqlite3.connect(other)
    assert [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["notes"], \
        "someone else's database is left as it was"


def read_only_folder(folder: Path) -> subprocess.CompletedProcess[bytes] | None:
    """A folder nobody may write, root included: a read-only bind mount (root) or chmod (a user)."""
    import os
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return None
    done = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot bind-mount read-only here: {done.stderr.decode().strip()}")
    return done


def release(folder: Path, mounted: subprocess.CompletedProcess[bytes] | None) -> None:
    if mounted is not None:
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.chmod(0o755)


def test_a_store_folder_that_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    db = build(folder / "r.db")
    m = tmp_path / "m.yaml"
    m.write_text(TEXT)
    mounted = read_only_folder(folder)
    try:
        code, said = matrix_cli(capsys, "run", "-m", str(m), "--db", str(db))
        assert code == Exit.STORE and f"cannot write {db}" in said or f"cannot write the result store {db}" in said, said
        assert "pass --db" in said and "Traceback" not in said
        code, said = matrix_cli(capsys, "run", "-m", str(m), "--db", str(folder / "new.db"))
        assert code == Exit.STORE and "pass --db" in said, said
        # Reading works, and says that it reads without locks.
        code, said = matrix_cli(capsys, "ls", "--db", str(db))
        assert code == 0 and "20260101-000000-aaaaaa" in said and "immutable" in said, said
    finally:
        release(folder, mounted)


def test_the_unlocked_read_is_refused_when_the_write_ahead_log_holds_results(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db = build(tmp_path / "r.db")
    # A writer that stays connected keeps its last results in the -wal file, not yet in the store file.
    writer = sqlite3.connect(db)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    writer.execute("INSERT INTO runs (run_id, schema, started_at, status) VALUES ('late', 1, 0, 'running')")
    writer.commit()
    # SQLite reads such a log read-only when it can; where it cannot (a -wal this user may not read, which root
    # cannot reproduce), the read-only open fails: that one call is made to fail here.
    real = sqlite3.connect

    def no_shared_read(target: str, *args: object, **kwargs: object) -> sqlite3.Connection:
        if "mode=ro" in str(target):
            raise sqlite3.OperationalError("unable to open database file")
        return real(target, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(sqlite3, "connect", no_shared_read)
    try:
        code, said = matrix_cli(capsys, "ls", "--db", str(db))
        assert code == Exit.STORE and "write-ahead log" in said and "wal_checkpoint" in said, said
        writer.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the log is in the store file now: immutable is right
        code, said = matrix_cli(capsys, "ls", "--db", str(db))
        assert code == 0 and "late" in said and "immutable" in said, said
    finally:
        writer.close()


def test_fuzz_random_damage_to_a_store_file_never_gives_a_traceback(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    pristine = build(tmp_path / "pristine.db").read_bytes()
    rng = random.Random(18)
    db = tmp_path / "fuzz.db"
    seen: set[int] = set()
    for i in range(40):
        data = bytearray(pristine)
        kind = rng.choice(["truncate", "overwrite", "zero page", "flip"])
        if kind == "truncate":
            data = data[:rng.randrange(len(data))]
        elif kind == "overwrite":
            at = rng.randrange(len(data))
            data[at:at + rng.randrange(1, 64)] = bytes(rng.randrange(256) for _ in range(64))[:len(data) - at]
        elif kind == "zero page":
            page = rng.randrange(len(data) // 4096)
            data[page * 4096:(page + 1) * 4096] = bytes(4096)
        else:
            for _ in range(8):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        db.write_bytes(bytes(data))
        for args in commands(db, tmp_path)[:5]:
            code, said = matrix_cli(capsys, *args)
            seen.add(code)
            assert "Traceback" not in said and code in (0, Exit.USAGE, Exit.STORE), \
                f"mutation {i} ({kind}): matrix {' '.join(args)} exit {code}\n{said}"
    assert Exit.STORE in seen


def test_a_store_path_that_is_a_planted_link_or_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SQLite would write a store into the file a link at --db names (another user's, here an empty one): refused
    for writing in one line (exit 6), read through when only read; a FIFO there would hang SQLite's open."""
    import os
    m = tmp_path / "m.yaml"
    m.write_text(TEXT)
    victim = tmp_path / "elsewhere" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"")
    (tmp_path / "results").mkdir()
    link = tmp_path / "results" / "matrix.db"
    link.symlink_to(victim)
    code, said = matrix_cli(capsys, "run", "-m", str(m), "--only", "model=mlp", "--db", str(link))
    assert code == Exit.STORE and said.count("\n") == 1 and "matrix.db is a symbolic link" in said, said
    assert victim.read_bytes() == b"", "the file the link names is left as it was"
    os.unlink(link)
    db = build(tmp_path / "elsewhere" / "real.db")
    link.symlink_to(db)
    code, said = matrix_cli(capsys, "ls", "--db", str(link))
    assert code == 0 and "20260101-000000-aaaaaa" in said, said
    os.unlink(link)
    os.mkfifo(link)
    for args in (["ls"], ["run", "-m", str(m), "--only", "model=mlp"]):
        code, said = matrix_cli(capsys, *args, "--db", str(link))
        assert code == Exit.STORE and "matrix.db is a FIFO, not a regular file" in said, said
