"""`matrix export` never writes through a link planted at its file or at the temporary name it once used, and
`matrix import` refuses a FIFO (or any file that is not a regular one) in one line instead of waiting on it."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.commands.export import export_command
from tests.store.synthetic import fill_history


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=2, repeats=2, cells=1, seed=3)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "elsewhere" / "victim"
    v.parent.mkdir()
    v.write_text("someone else's\n")
    return v


def test_a_link_at_the_file_is_refused_and_its_target_unchanged(db: Path, tmp_path: Path, victim: Path) -> None:
    """Refused, not replaced: the user named this file, and a link there is theirs to look at."""
    out = tmp_path / "box.jsonl.gz"
    out.symlink_to(victim)
    done = cli("export", "--db", str(db), "-o", str(out))
    assert done.returncode == 6, done.stderr
    assert done.stderr.count("\n") == 1 and "box.jsonl.gz is a symbolic link" in done.stderr
    assert victim.read_text() == "someone else's\n" and out.is_symlink()


def test_a_link_at_the_old_temporary_name_is_never_followed(db: Path, tmp_path: Path, victim: Path) -> None:
    """The temporary file is made in a new private folder, not at a name anyone can guess and plant."""
    out = tmp_path / "box.jsonl.gz"
    (tmp_path / ".box.jsonl.gz.tmp").symlink_to(victim)
    export_command(db, out, None, None)
    assert victim.read_text() == "someone else's\n"
    assert gzip.decompress(out.read_bytes()).startswith(b'{"counts"')
    assert not out.is_symlink() and not [p for p in tmp_path.iterdir() if p.name.startswith(".matrix-write-")]


def test_a_fifo_at_the_file_is_refused_without_blocking(db: Path, tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "box.jsonl.gz")
    done = cli("export", "--db", str(db), "-o", str(tmp_path / "box.jsonl.gz"))
    assert done.returncode == 6 and "is a FIFO, not a regular file" in done.stderr, done.stderr


def test_importing_a_fifo_is_refused_in_one_line(db: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "box.jsonl.gz"
    os.mkfifo(fifo)
    done = cli("import", str(fifo), "--db", str(tmp_path / "team.db"), timeout=30)  # blocked: TimeoutExpired
    assert done.returncode == 6, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "box.jsonl.gz is a FIFO, not a regular file" in lines[0] and "nothing was imported" in lines[0]
    assert not (tmp_path / "team.db").exists()


def test_importing_a_device_is_refused(tmp_path: Path) -> None:
    done = cli("import", "/dev/zero", "--db", str(tmp_path / "team.db"), timeout=30)
    assert done.returncode == 6 and "/dev/zero is a character device, not a regular file" in done.stderr, done.stderr
