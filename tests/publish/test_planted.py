"""`matrix publish` into a site where someone planted a link, a FIFO or a folder link: refused in one line with
exit status 6 before any page is written, and the file the link points to is never touched. Refused rather than
replaced: a site is republished unattended (a nightly job), and a planted name is something its owner must see;
a second publish into the same folder at the same moment leaves whole pages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runner.publish import publish
from tests.publish.test_site import pages


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "elsewhere" / "victim.txt"
    v.parent.mkdir()
    v.write_text("not the site's\n")
    return v


@pytest.mark.parametrize("name", ["index.html", "site.css", ".matrix-site", "machines.html"])
def test_a_link_planted_at_a_page_is_refused_and_its_target_unchanged(
        pooled_db: Path, tmp_path: Path, victim: Path, name: str) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    before = pages(site)
    (site / name).unlink()
    (site / name).symlink_to(victim)
    done = cli("publish", "--db", str(pooled_db), "-o", str(site))
    assert done.returncode == 6, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{name} is a symbolic link" in lines[0] and "never writes through a link" in lines[0]
    assert victim.read_text() == "not the site's\n"
    after = pages(site)   # nothing of the site changed either: the refusal came before any page
    assert {k: v for k, v in after.items() if k != name} == {k: v for k, v in before.items() if k != name}


def test_a_link_planted_at_cells_is_refused_and_the_folder_it_names_untouched(
        pooled_db: Path, tmp_path: Path, victim: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    import shutil
    shutil.rmtree(site / "cells")
    (site / "cells").symlink_to(victim.parent, target_is_directory=True)
    done = cli("publish", "--db", str(pooled_db), "-o", str(site))
    assert done.returncode == 6 and "cells is a symbolic link" in done.stderr, done.stderr
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]


def test_a_fifo_planted_at_a_page_does_not_block(pooled_db: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    (site / "index.html").unlink()
    os.mkfifo(site / "index.html")
    done = cli("publish", "--db", str(pooled_db), "-o", str(site))   # a blocked write would time out
    assert done.returncode == 6 and "index.html is a FIFO, not a regular file" in done.stderr, done.stderr


def test_pages_are_replaced_not_rewritten_in_place(pooled_db: Path, tmp_path: Path) -> None:
    """A reader holding the old page keeps it whole: the new one is a new file renamed over the name."""
    site = tmp_path / "site"
    publish([pooled_db], site)
    (site / "index.html").write_text("an old page a web server is sending")
    with open(site / "index.html") as held:
        publish([pooled_db], site)
        assert held.read() == "an old page a web server is sending"
    assert (site / "index.html").read_text().startswith("<!doctype html>")
    assert not [p for p in site.iterdir() if p.name.startswith(".matrix-write-")]


def test_two_publishes_at_once_leave_a_whole_site(pooled_db: Path, tmp_path: Path) -> None:
    publish([pooled_db], tmp_path / "alone")
    site = tmp_path / "site"
    procs = [subprocess.Popen([sys.executable, "-m", "runner.cli", "publish", "--db", str(pooled_db), "-o", str(site)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    assert pages(site) == pages(tmp_path / "alone")


def test_a_publish_in_flight_is_a_site_to_another(pooled_db: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Three publishes into one new folder at once: one refused the folder as "other files and no .matrix-site"
    because another had made its private staging folder before its mark. The mark is written before anything else,
    and a folder that holds only writes in flight (safewrite's private names) is a new folder."""
    from runner.base import safewrite
    from runner.publish import site as site_mod

    seen: list[bool] = []
    real = site_mod._write_pages

    def watch(pages_: dict[str, str], out: Path, staging: Path) -> list[Path]:
        seen.append((out / site_mod.MARK).is_file())  # the first page is written after the mark
        return real(pages_, out, staging)

    monkeypatch.setattr(site_mod, "_write_pages", watch)
    site = tmp_path / "site"
    site.mkdir()
    (site / f"{safewrite.PRIVATE_PREFIX}0123456789abcdef.tmp").mkdir()  # another publish's staging, no mark yet
    publish([pooled_db], site)
    assert seen == [True] and (site / "index.html").is_file()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    (mine / f"{safewrite.PRIVATE_PREFIX}0123456789abcdef.tmp").mkdir()
    done = cli("publish", "--db", str(pooled_db), "-o", str(mine))
    assert done.returncode == 2 and "no .matrix-site" in done.stderr, done.stderr
