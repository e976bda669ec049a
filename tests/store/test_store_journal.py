"""The disk-full journal is trusted only where no one else can have written it: beside the store or in a
folder of this user's own (0700), a regular file of this user's or the store owner's, writable by no one
else. A planted, linked or junk journal is named in one line, never imported, and blocks no later run."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path

import pytest

from runner import matrix
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store, journal

M = matrix.parse("""
name: j
environments: [{name: a, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 3}
""")


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A world-writable sticky temporary folder, as /tmp is, and a state folder that cannot be made."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocker))
    return shared


def forged_row(db: Path, throughput: float) -> str:
    """The journal line another user would plant: a result of this store, with the figure they want."""
    with Store(db) as store:
        store.start_run("r9", None, "j", [])
        values, _ = store._values("r9", Task(M.cells()[0], 0), Outcome(
            Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": throughput}}, "", "", 1.0, 2.0))
        from runner.store import _COLUMNS
        row = dict(zip(_COLUMNS, values, strict=True))
        store.finish_run("r9", "complete")
    return json.dumps({"journal": journal.JOURNAL_SCHEMA, "db": str(db.resolve()), "kind": "result", "row": row}) + "\n"


def test_no_journal_is_looked_for_in_a_shared_temporary_folder(tmp_path: Path, shared_tmp: Path) -> None:
    db = tmp_path / "store" / "r.db"
    db.parent.mkdir()
    line = forged_row(db, 9999.0)
    digest = __import__("hashlib").sha256(str(db.resolve()).encode()).hexdigest()[:16]
    (shared_tmp / f"r.db-{digest}.journal").write_text(line)  # where the journal used to be looked for
    assert all(p.parent != shared_tmp for p in journal.paths(db))
    with Store(db) as store:
        assert list(store.rows()) == []


def test_a_journal_away_from_the_store_lives_in_a_folder_of_this_users_own(tmp_path: Path, shared_tmp: Path) -> None:
    db = tmp_path / "store" / "r.db"
    db.parent.mkdir()
    db.parent.chmod(0o555)  # no room beside the store
    try:
        kept = journal.keep(db, "{}\n")
    finally:
        db.parent.chmod(0o755)
    if os.geteuid() == 0:  # root writes a read-only folder anyway
        assert kept == db.with_name("r.db.journal")
        kept.unlink()
        db.with_name("r.db.journal").mkdir()  # now nothing can be written beside it
        kept = journal.keep(db, "{}\n")
    assert kept is not None and kept.parent.parent.parent == shared_tmp
    folder = kept.parent.lstat()
    assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == os.getuid()
    assert stat.S_IMODE(kept.lstat().st_mode) == 0o600


@pytest.mark.parametrize("how", ["others-may-write", "link", "other-user", "hard-link"])
def test_a_planted_journal_is_named_in_one_line_and_never_imported(tmp_path: Path, shared_tmp: Path, how: str,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    line = forged_row(db, 9999.0)
    planted = journal.paths(db)[0]
    if how == "link":
        target = tmp_path / "elsewhere"
        target.write_text(line)
        planted.symlink_to(target)
    elif how == "hard-link":  # another name of a file elsewhere, linked in where others may write
        target = tmp_path / "elsewhere"
        target.write_text(line)
        target.chmod(0o644)
        os.link(target, planted)
    else:
        planted.write_text(line)
        if how == "others-may-write":
            planted.chmod(0o666)
        else:
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(planted, 65534, 65534)
            planted.chmod(0o644)
    with Store(db) as store:  # opens, imports nothing, and the run goes on
        assert list(store.rows()) == []
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{planted}: not imported into {db}: " in err[0], err
    assert planted.is_symlink() or planted.exists()  # someone else's file is left alone
    with Store(db, readonly=True):
        pass
    assert "not in the store yet" not in capsys.readouterr().err


def test_a_junk_journal_of_this_user_is_set_aside_and_blocks_nothing(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.db"
    Store(db).close()
    (tmp_path / "r.db.journal").write_text("this is not JSON\n")
    with Store(db) as store:
        assert list(store.rows()) == []
    err = capsys.readouterr().err
    assert "r.db.journal: not imported into" in err and "moved to" in err, err
    assert not (tmp_path / "r.db.journal").exists()
    assert len(list(tmp_path.glob("r.db.journal.refused-*"))) == 1
    with Store(db) as store:  # the next one says nothing more
        assert list(store.rows()) == []
    assert "not imported" not in capsys.readouterr().err


def test_a_result_is_never_appended_to_a_file_linked_into_the_journals_place(tmp_path: Path, shared_tmp: Path) -> None:
    db = tmp_path / "r.db"
    victim = tmp_path / "someone-elses-file"
    victim.write_text("theirs\n")
    victim.chmod(0o644)
    os.link(victim, journal.paths(db)[0])
    kept = journal.keep(db, "{}\n")
    assert kept is not None and kept != journal.paths(db)[0]
    assert victim.read_text() == "theirs\n"


def test_a_fifo_put_in_the_journals_place_after_the_check_is_never_waited_on(tmp_path: Path) -> None:
    import threading
    fifo = tmp_path / "r.db.journal"
    os.mkfifo(fifo, 0o600)
    failed: list[BaseException] = []

    def open_it() -> None:
        try:
            with journal.locked(fifo, "a"):
                pass
        except OSError as e:
            failed.append(e)

    worker = threading.Thread(target=open_it, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and failed, "the journal's open waits on a FIFO"
