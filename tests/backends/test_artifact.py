"""The benchmark's zipapp: the same sources give the same bytes and name, every module is in it, and it
lands where a process can run it even when the cache cannot be written."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runner.backends import artifact


def test_the_zip_is_reproducible_and_holds_every_module() -> None:
    data = artifact.payload()
    assert artifact.payload.__wrapped__() == data  # built again from the files: the same bytes
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == ["__main__.py"] + [f"matrix_bench/{p.name}" for p in artifact.sources()]
        assert {"matrix_bench/__init__.py", "matrix_bench/contract.py", "matrix_bench/main.py"} <= set(names)
        for info in infos:
            assert info.date_time == (1980, 1, 1, 0, 0, 0) and info.compress_type == zipfile.ZIP_STORED
            assert info.external_attr >> 16 == 0o644 and info.create_system == 3
        for p in artifact.sources():
            assert zf.read(f"matrix_bench/{p.name}") == p.read_bytes()
    assert artifact.name() == f"bench-{hashlib.sha256(data).hexdigest()[:12]}.pyz"


def test_install_writes_once_and_replaces_a_file_that_differs(tmp_path: Path) -> None:
    first = artifact.install(tmp_path)
    assert first.name == artifact.name() and first.read_bytes() == artifact.payload()
    stamp = first.stat().st_mtime_ns
    os.utime(first, ns=(stamp - 10**9, stamp - 10**9))
    assert artifact.install(tmp_path) == first and first.stat().st_mtime_ns == stamp - 10**9  # not rewritten
    first.write_bytes(b"not the benchmark")
    assert artifact.install(tmp_path).read_bytes() == artifact.payload()
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary file left behind


def test_a_cache_that_cannot_be_written_falls_back_to_a_private_folder(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # the cache folder would be under a file
    monkeypatch.setattr(artifact, "_fallback", [])
    path = artifact.path()
    assert not str(path).startswith(str(blocker)) and path.read_bytes() == artifact.payload()
    assert artifact.path() == path
    assert path.parent.stat().st_mode & 0o777 == 0o700


def test_the_module_writes_the_zipapp_where_asked(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "runner.backends.artifact", str(tmp_path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / artifact.name()
    assert (tmp_path / artifact.name()).read_bytes() == artifact.payload()


@pytest.mark.parametrize("content", ["the same bytes", "other bytes"])
def test_a_link_planted_in_the_cache_is_neither_run_nor_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    """A link at the zipapp's name in the cache: to a file of the same bytes (its owner could change them after
    the check) it is not run; to another file it is not written through. The cache falls back to a private
    folder, as when it cannot be written, and the link and its target stay as they were."""
    victim = tmp_path / "elsewhere" / "bench.pyz"
    victim.parent.mkdir()
    body = artifact.payload() if content == "the same bytes" else b"someone else's file"
    victim.write_bytes(body)
    cache = tmp_path / "cache" / "matrix"
    cache.mkdir(parents=True)
    (cache / artifact.name()).symlink_to(victim)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(artifact, "_fallback", [])
    path = artifact.path()
    assert path.parent != cache and not path.is_symlink() and path.read_bytes() == artifact.payload()
    assert victim.read_bytes() == body and (cache / artifact.name()).is_symlink()
    with pytest.raises(artifact.safewrite.UnsafePath, match="is a symbolic link"):
        artifact.install(cache)
