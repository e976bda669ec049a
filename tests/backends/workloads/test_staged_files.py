"""Staged workload files: each repeat gets a fresh copy of exactly the hashed bytes with their own modes, so a
program that writes beside itself never makes a later repeat or environment warm; the placed master is
checked again on every reuse; a link inside a folder is refused, never copied as its target or dropped."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from runner.backends.workloads.files import (
    MANIFEST,
    Changed,
    manifest_digest,
    owner_ids,
    scan,
    stage,
    tar_members,
)
from runner.base.safewrite import UnsafePath
from runner.bench import workload as launcher

# Caches beside itself, as a program with a compile or dataset cache does: a warm run is twice as fast.
CACHING = """
import os, stat, sys
here = os.path.dirname(os.path.abspath(__file__))
cache = os.path.join(here, "cache.bin")
warm = os.path.exists(cache)
open(cache, "w").write("x")
print("speed %d img/s" % (200 if warm else 100))
print("mode %o" % stat.S_IMODE(os.stat(os.path.join(here, "secret.cfg")).st_mode))
"""
PARSER = {"kind": "pattern", "file": None, "figures": [
    {"name": "throughput", "regex": r"speed (\d+)", "unit": "img/s", "reduce": "last", "skip": 0, "optional": False,
     "scale": 1.0, "metric": "throughput", "better": "higher", "shown_unit": "img/s"}]}


def sources(tmp_path: Path) -> tuple[Any, ...]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(CACHING)
    (src / "secret.cfg").write_text("token\n")
    (src / "secret.cfg").chmod(0o600)
    return (scan("train.py", src), scan("secret.cfg", src))


def repeat(master: Path, entries: tuple[Any, ...]) -> tuple[dict[str, Any], str]:
    spec = {"v": launcher.SPEC_VERSION, "name": "t", "argv": ["{python}", "{files}/train.py"], "values": {},
            "files": str(master), "files_manifest": manifest_digest(entries), "params": {}, "parser": PARSER}
    real = launcher.capture
    launcher.capture = lambda values: {}
    tail: list[str] = []
    real_pump = launcher.pump
    launcher.pump = lambda stream, parser, t: (real_pump(stream, parser, t), tail.extend(t))[0]
    try:
        _, result = launcher.main([json.dumps(spec)])
    finally:
        launcher.capture, launcher.pump = real, real_pump
    assert result is not None
    return dict(result), "\n".join(tail)


def test_a_program_caching_beside_itself_never_makes_a_later_repeat_warm(tmp_path: Path) -> None:
    entries = sources(tmp_path)
    master = stage(entries, tmp_path / "staged")
    got = [repeat(master, entries) for _ in range(3)]
    assert [r["metrics"]["throughput"] for r, _ in got] == [100.0, 100.0, 100.0], [r["reason"] for r, _ in got]
    assert all("mode 600" in tail for _, tail in got)  # 0600 stays 0600 where the program reads it
    assert not (master / "cache.bin").exists() and stage(entries, tmp_path / "staged") == master


def test_the_placed_master_is_read_only_and_checked_again_when_reused(tmp_path: Path) -> None:
    entries = sources(tmp_path)
    (tmp_path / "src" / "train.py").chmod(0o644)
    master = stage(entries, tmp_path / "staged")
    # Read-only, and readable by whom the source is: a 0600 file is not readable by every local user when staged.
    assert stat.S_IMODE((master / "secret.cfg").stat().st_mode) == 0o400
    assert stat.S_IMODE((master / "train.py").stat().st_mode) == 0o444
    train_mode = stat.S_IMODE((tmp_path / "src" / "train.py").stat().st_mode)
    assert json.loads((master / MANIFEST).read_text())["members"] == [
        ["train.py", entries[0].members[0][1], train_mode], ["secret.cfg", entries[1].members[0][1], 0o600]]
    os.chmod(master / "train.py", 0o644)
    (master / "train.py").write_text("print('speed 999 img/s')\n")  # a program run as root can still write it
    result, _ = repeat(master, entries)
    assert result["status"] == "failed" and "changed after it was placed" in result["reason"]
    assert stage(entries, tmp_path / "staged") == master  # reuse finds it altered and places it again
    assert (master / "train.py").read_text() == CACHING
    assert repeat(master, entries)[0]["metrics"]["throughput"] == 100.0


@pytest.mark.parametrize("link", ["file", "folder"])
def test_a_link_inside_a_folder_is_refused_naming_it(tmp_path: Path, link: str) -> None:
    lib = tmp_path / "lib"
    (lib / "real").mkdir(parents=True)
    (lib / "real" / "a.py").write_text("A = 1\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "b.py").write_text("B = 2\n")
    if link == "file":
        (lib / "b.py").symlink_to(outside / "b.py")
    else:
        (lib / "vendored").symlink_to(outside)
    with pytest.raises(ValueError, match=r"lib: (b\.py|vendored) is a symbolic link to .*copy it in"):
        scan("lib", tmp_path)


@pytest.mark.parametrize(("user", "owner", "secret_mode"), [
    (None, (0, 0), 0o400), ("", (0, 0), 0o400), ("1000", (1000, 0), 0o400), ("1000:1001", (1000, 1001), 0o400),
    ("builder", (0, 0), 0o444)])
def test_the_tar_for_a_container_keeps_modes_in_the_manifest_and_the_master_read_only(
        tmp_path: Path, user: str | None, owner: tuple[int, int], secret_mode: int) -> None:
    """The master in a container belongs to the user the launcher runs as, as restricted as its sources; a user
    known by name only (its id is the image's) gets a master readable by all inside the container."""
    entries = sources(tmp_path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar_members(entries, "/tmp/matrix", tar, 0.0, owner_ids(user))
    members = {m.name.rsplit("/", 1)[-1]: m for m in tarfile.open(fileobj=io.BytesIO(buf.getvalue()))}
    assert members["secret.cfg"].mode == secret_mode and members["train.py"].mode & 0o222 == 0
    assert {(m.uid, m.gid) for m in members.values()} == {owner}
    assert MANIFEST in members


def test_an_edited_folder_is_still_refused(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "a.py").write_text("A = 1\n")
    entries = (scan("lib", tmp_path),)
    (tmp_path / "lib" / "b.py").symlink_to(tmp_path / "lib" / "a.py")
    with pytest.raises(Changed, match="symbolic link"):
        stage(entries, tmp_path / "staged")


def test_the_launcher_copies_only_what_the_manifest_names(tmp_path: Path) -> None:
    entries = sources(tmp_path)
    master = stage(entries, tmp_path / "staged")
    os.chmod(master, 0o755)
    (master / "planted.py").write_text("")
    copy, problem = launcher.fresh_files(str(master), manifest_digest(entries), str(tmp_path / "c"))
    assert problem is None and sorted(os.listdir(copy)) == ["secret.cfg", "train.py"]
    assert (launcher.fresh_files(str(master), "0" * 64, str(tmp_path / "d"))[1] or "").startswith("the manifest")


def test_a_link_planted_at_the_old_temporary_name_or_at_the_folder_is_never_followed(tmp_path: Path) -> None:
    """Staging once used `.files-HASH.PID.tmp`, a name anyone who may write the work folder could plant a link
    at (and get the files written into a folder of theirs); it now makes a new private folder. A link at
    files-HASH itself is refused (the repeat is not started, with this reason), never followed or trusted."""
    entries = sources(tmp_path)
    staged = tmp_path / "staged"
    staged.mkdir()
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    from runner.backends.workloads.files import folder_name
    (staged / f".{folder_name(entries)}.{os.getpid()}.tmp").symlink_to(theirs, target_is_directory=True)
    master = stage(entries, staged)
    assert list(theirs.iterdir()) == [] and not master.is_symlink()
    assert sorted(p.name for p in staged.iterdir()) == sorted([master.name, f".{folder_name(entries)}.{os.getpid()}.tmp"])
    import shutil
    shutil.copytree(master, theirs / "copy")   # the same bytes, in a folder someone else controls
    shutil.rmtree(master)
    master.symlink_to(theirs / "copy", target_is_directory=True)
    with pytest.raises(UnsafePath, match="is a symbolic link"):
        stage(entries, staged)
