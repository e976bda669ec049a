"""`matrix report` never writes through a link planted at one of its files or in the place of its plots/ folder:
refused in one line (exit 6), the file or folder the link names untouched. Refused rather than replaced: the
report folder is the user's (--out), and a link there is theirs to look at."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.report.test_cli import matrix


def _victim(tmp_path: Path) -> Path:
    v = tmp_path / "elsewhere" / "victim.txt"
    v.parent.mkdir()
    v.write_text("someone else's\n")
    return v


def test_a_link_at_a_report_file_is_refused(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / "summary.csv").symlink_to(victim)
    done = matrix(matrix_cmd, "report", "--db", str(db), "--format", "csv", "--out", str(out))
    assert done.returncode == 6, done.stderr
    assert done.stderr.count("\n") == 1 and "summary.csv is a symbolic link" in done.stderr
    assert victim.read_text() == "someone else's\n"


def test_a_link_in_the_place_of_plots_is_refused(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    out = tmp_path / "report"
    out.mkdir()
    (out / "plots").symlink_to(victim.parent, target_is_directory=True)
    done = matrix(matrix_cmd, "report", "--db", str(db), "--format", "md", "--out", str(out))
    assert done.returncode == 6 and "plots is a symbolic link" in done.stderr, done.stderr
    assert [p.name for p in victim.parent.iterdir()] == ["victim.txt"]


def test_a_fifo_at_a_report_file_does_not_block(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    out.mkdir()
    os.mkfifo(out / "report.json")
    done = matrix(matrix_cmd, "report", "--db", str(db), "--format", "json", "--out", str(out))
    assert done.returncode == 6 and "report.json is a FIFO" in done.stderr, done.stderr
    assert stat.S_ISFIFO(os.lstat(out / "report.json").st_mode)


def test_a_report_replaces_its_own_files(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    for _ in range(2):
        done = matrix(matrix_cmd, "report", "--db", str(db), "--format", "json", "--format", "csv", "--out", str(out))
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["repeats.csv", "report.json", "summary.csv"]
