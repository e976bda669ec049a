"""runner/base/safewrite.py: a write never follows a link planted at its name, never opens (and so never blocks on) a
FIFO there, never replaces another user's file, and leaves a whole file whoever writes at the same time."""

from __future__ import annotations

import multiprocessing
import os
import stat
import threading
from pathlib import Path

import pytest

from runner.base import safewrite
from runner.base.errors import StoreError
from runner.base.safewrite import UnsafePath


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another user's file elsewhere that a planted link points to (here: a file outside the folder written)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    v = elsewhere / "victim"
    v.write_text("the victim's own content\n")
    return v


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(safewrite.PRIVATE_PREFIX))


def test_a_new_file_is_written_whole_with_the_mode_asked(tmp_path: Path) -> None:
    out = safewrite.write_text(tmp_path / "a.txt", "hello\n")
    assert out.read_text() == "hello\n" and stat.S_IMODE(out.stat().st_mode) == 0o600
    safewrite.write_bytes(out, b"again", mode=0o644)       # this user's regular file: replaced
    assert out.read_bytes() == b"again" and stat.S_IMODE(out.stat().st_mode) == 0o644 & ~_umask()
    assert leftovers(tmp_path) == []


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("target", ["victim", "missing"])
def test_a_planted_link_is_refused_and_its_target_unchanged(tmp_path: Path, victim: Path, target: str) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").symlink_to(victim if target == "victim" else victim.with_name("nothing-yet"))
    with pytest.raises(UnsafePath, match=r"index.html is a symbolic link \(to .*\): matrix never writes through"):
        safewrite.write_text(site / "index.html", "<html>")
    assert victim.read_text() == "the victim's own content\n"
    assert not victim.with_name("nothing-yet").exists()          # a dangling link is not created through either
    assert (site / "index.html").is_symlink() and leftovers(site) == []


def test_a_planted_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "out.jsonl.gz")
    errors: list[BaseException] = []

    def write() -> None:
        try:
            safewrite.write_bytes(tmp_path / "out.jsonl.gz", b"data")
        except BaseException as e:  # noqa: BLE001 (kept for the assertion)
            errors.append(e)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the write blocked on a FIFO"
    assert isinstance(errors[0], UnsafePath) and "is a FIFO, not a regular file" in str(errors[0])
    assert errors[0].exit_code == 6 and isinstance(errors[0], StoreError)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_file_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "report.html"
    theirs.write_text("theirs")
    os.chown(theirs, 4321, 4321)
    with pytest.raises(UnsafePath, match="belongs to user id 4321, not to this user"):
        safewrite.write_text(theirs, "mine")
    assert theirs.read_text() == "theirs"


def test_a_failure_mid_way_changes_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "pack.tgz"
    out.write_bytes(b"the last whole pack")
    with pytest.raises(RuntimeError), safewrite.replacing(out) as f:
        f.write(b"half a pa")
        raise RuntimeError("killed")
    assert out.read_bytes() == b"the last whole pack" and leftovers(tmp_path) == []


def test_a_link_planted_while_writing_is_refused_at_the_rename(tmp_path: Path, victim: Path) -> None:
    out = tmp_path / "a.json"
    with pytest.raises(UnsafePath, match="symbolic link"), safewrite.replacing(out) as f:
        f.write(b"{}")
        out.symlink_to(victim)
    assert victim.read_text() == "the victim's own content\n" and out.is_symlink() and leftovers(tmp_path) == []


def _hammer(path: str, letter: str, rounds: int) -> None:
    for _ in range(rounds):
        safewrite.write_bytes(Path(path), letter.encode() * 200_000)


def test_concurrent_writers_leave_a_whole_file(tmp_path: Path) -> None:
    out = tmp_path / "shared.html"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(str(out), letter, 30)) for letter in "abc"]
    for p in procs:
        p.start()
    seen = set()
    while any(p.is_alive() for p in procs):
        try:
            data = out.read_bytes()
        except FileNotFoundError:
            continue
        seen.add((len(data), len(set(data))))
    for p in procs:
        p.join()
        assert p.exitcode == 0
    data = out.read_bytes()
    assert len(data) == 200_000 and len(set(data)) == 1
    assert seen <= {(200_000, 1)}, seen   # every read saw one writer's whole file
    assert leftovers(tmp_path) == []


def test_a_folder_of_matrixs_own_is_never_a_link(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "plots").symlink_to(victim.parent)
    with pytest.raises(UnsafePath, match="plots is a symbolic link .* where matrix makes a folder of its own"):
        safewrite.folder(tmp_path / "plots")
    assert safewrite.folder(tmp_path / "a" / "b").is_dir()


def test_a_log_created_for_streaming_never_truncates_a_planted_links_target(tmp_path: Path, victim: Path) -> None:
    (tmp_path / "t1.rank0.out").symlink_to(victim)
    with pytest.raises(UnsafePath):
        safewrite.create(tmp_path / "t1.rank0.out")
    assert victim.read_text() == "the victim's own content\n"
    with safewrite.create(tmp_path / "t2.rank0.out") as f:
        f.write(b"line\n")
    assert (tmp_path / "t2.rank0.out").read_bytes() == b"line\n" and leftovers(tmp_path) == []


def test_reading_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "box.jsonl.gz")
    with pytest.raises(UnsafePath, match="is a FIFO, not a regular file"):
        safewrite.open_regular(tmp_path / "box.jsonl.gz")
    (tmp_path / "ok").write_bytes(b"x")
    with safewrite.open_regular(tmp_path / "ok") as f:
        assert f.read() == b"x"


def test_a_ranks_log_never_truncates_what_a_planted_link_names(tmp_path: Path, victim: Path) -> None:
    from runner.backends import ranks
    stem = tmp_path / "t1"
    ranks.rank_file(stem, 0, "log").symlink_to(victim)
    with pytest.raises(UnsafePath), ranks.rank_files(stem, 1):
        pass
    assert victim.read_text() == "the victim's own content\n"


def test_a_run_whose_logs_folder_is_a_planted_link_stops_in_one_line(tmp_path: Path, victim: Path) -> None:
    """The local backend's logs go to WORKDIR/logs/RUN: a link there would take every rank's output elsewhere.
    The run stops before measuring (exit 6, the filesystem's status), the folder the link names untouched."""
    import subprocess
    import sys
    (tmp_path / "m.yaml").write_text("name: planted\nenvironments: [{name: a, backend: local}]\n"
                                     "axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}\n"
                                     "run: {iterations: 1, warmup: 0, repeats: 1}\n")
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "logs").symlink_to(victim.parent, target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "runner.cli", "run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 6, done.stdout + done.stderr
    assert "logs is a symbolic link" in done.stderr and done.stderr.count("error:") == 1, done.stderr
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim"]
