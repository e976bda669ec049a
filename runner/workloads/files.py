"""A workload's files: read and hashed when the matrix is read, placed in each environment as the same bytes.

Each entry (a file or a folder, relative to the matrix file's folder) lands under its own name in one
folder, `{files}` in the argv: a staged copy in the work directory for local runs, `/tmp/matrix/files-HASH`
in a container (put_archive, like the benchmark's zipapp), `files-HASH/` in the Slurm results directory
that every node and container runtime already sees. What is placed is checked against the hash the cell's
key was made from: a script edited during a run is refused, not measured under the old definition.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path

from runner.spec import stable_hash

MAX_BYTES = 64 * 2**20  # files are scripts and configurations; data sets go through `mounts:` or a dataset path
SKIPPED_DIRS = ("__pycache__",)  # what running a script beside its sources adds: not part of the definition
SKIPPED_SUFFIXES = (".pyc", ".pyo")


class Changed(Exception):
    """A workload file is not what it was when the matrix was read."""


@dataclass(frozen=True)
class FileEntry:
    """One `files:` entry: its name in the placed folder, where it is here, and the hash of its content
    (a folder: of its members' relative paths and contents)."""

    name: str
    source: Path
    digest: str
    members: tuple[tuple[str, str], ...]  # (path relative to the entry's parent, sha256) of every regular file


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        found += [Path(folder) / n for n in sorted(names) if not n.endswith(SKIPPED_SUFFIXES)]
    return found


def scan(entry: str, base: Path) -> FileEntry:
    """Read one entry and hash it; a ValueError with what is wrong."""
    source = Path(entry).expanduser()
    source = source if source.is_absolute() else base / source
    name = source.name if source.name not in ("", ".", "..") else source.resolve().name
    if not source.exists():
        raise ValueError(f"{entry}: no such file or folder (relative paths start at {base})")
    members: list[tuple[str, str]] = []
    total = 0
    paths = [source] if source.is_file() else _walk(source) if source.is_dir() else []
    if not paths and not source.is_dir():
        raise ValueError(f"{entry}: not a regular file or folder")
    for path in paths:
        if not path.is_file():
            continue
        total += path.stat().st_size
        if total > MAX_BYTES:
            raise ValueError(f"{entry}: more than {MAX_BYTES // 2**20} MiB; workload files are scripts and "
                             "configurations: give data through `mounts:` or a path the program reads")
        rel = name if path == source else f"{name}/{path.relative_to(source).as_posix()}"
        members.append((rel, _sha256(path)))
    return FileEntry(name, source, stable_hash(members, 64), tuple(members))


def _read(entry: FileEntry, rel: str) -> bytes:
    """One member's bytes, checked against the hash taken when the matrix was read."""
    path = entry.source if rel == entry.name else entry.source / rel.split("/", 1)[1]
    try:
        data = path.read_bytes()
    except OSError as e:
        raise Changed(f"workload file {path} cannot be read any more ({e.strerror})") from e
    if hashlib.sha256(data).hexdigest() != dict(entry.members)[rel]:
        raise Changed(f"workload file {path} changed since the matrix was read; run again to measure the new "
                      "version (it is a new definition)")
    return data


def _check_members(entry: FileEntry) -> None:
    now = [(rel, digest) for rel, digest in scan(str(entry.source), entry.source.parent).members]
    if now != list(entry.members):
        raise Changed(f"workload files under {entry.source} changed since the matrix was read (files added, removed "
                      "or edited); run again to measure the new version")


def folder_name(entries: tuple[FileEntry, ...]) -> str:
    """files-<hash of every entry>: the same files give the same folder, wherever they are placed."""
    return "files-" + stable_hash({e.name: e.digest for e in entries})


def stage(entries: tuple[FileEntry, ...], parent: Path) -> Path:
    """The files in parent/files-HASH (written once, atomically; reused when complete). Raises Changed."""
    target = parent / folder_name(entries)
    if (target / ".complete").exists():
        return target
    tmp = parent / f".{target.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for entry in entries:
            if entry.source.is_dir():
                _check_members(entry)
            for rel, _ in entry.members:
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(_read(entry, rel))
                if os.access(entry.source if rel == entry.name else entry.source / rel.split("/", 1)[1], os.X_OK):
                    dest.chmod(0o755)
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / ".complete").write_text("")
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / ".complete").exists():  # another process placed it first: theirs is the same
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def tar_members(entries: tuple[FileEntry, ...], inside: str, tar: tarfile.TarFile, mtime: float) -> None:
    """Add the files under `inside`/files-HASH to a tar for put_archive. Raises Changed."""
    root = f"{inside.strip('/')}/{folder_name(entries)}"
    made: set[str] = set()
    for entry in entries:
        if entry.source.is_dir():
            _check_members(entry)
        for rel, _ in entry.members:
            parts = f"{root}/{rel}".split("/")
            for depth in range(len(inside.strip("/").split("/")) + 1, len(parts)):
                folder = "/".join(parts[:depth])
                if folder not in made:
                    made.add(folder)
                    info = tarfile.TarInfo(folder)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, mtime
                    tar.addfile(info)
            data = _read(entry, rel)
            info = tarfile.TarInfo(f"{root}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o755, mtime
            tar.addfile(info, io.BytesIO(data))
