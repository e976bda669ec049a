"""A workload's files: read and hashed when the matrix is read, placed in each environment as the same bytes.

Each entry (a file or a folder, relative to the matrix file's folder) lands under its own name in one
folder, `{files}` in the argv: a staged copy in the work directory for local runs, `/tmp/matrix/files-HASH`
in a container (put_archive, like the benchmark's zipapp), `files-HASH/` in the Slurm results directory
that every node and container runtime already sees. What is placed is checked against the hash the cell's
key was made from: a script edited during a run is refused, not measured under the old definition.

That placed folder is the master, read-only, with a manifest (.manifest.json: each member's path, sha256
and mode). The launcher never hands it to the program: each repeat gets a fresh copy made from the
manifest, every member's hash checked, its mode as it was here (0600 stays 0600), so a program that
caches or writes beside itself leaves nothing for the next repeat or environment. A link inside a folder
is refused (its target is not part of the folder; a linked folder would be silently left out).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from runner.base import safewrite
from runner.domain.cells import stable_hash

MANIFEST = ".manifest.json"
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
    modes: tuple[int, ...] = ()  # each member's permission bits, in the order of members (not in the digest)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _walk(root: Path, entry: str) -> list[Path]:
    """Every file under root; a ValueError for a link (a linked folder os.walk would silently skip)."""
    found: list[Path] = []
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            if os.path.islink(os.path.join(folder, name)):
                rel = Path(folder, name).relative_to(root).as_posix()
                raise ValueError(f"{entry}: {rel} is a symbolic link to {os.readlink(os.path.join(folder, name))}; "
                                 "its target is not part of the folder: copy it in, or list it in files:")
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
    modes: list[int] = []
    total = 0
    paths = [source] if source.is_file() else _walk(source, entry) if source.is_dir() else []
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
        modes.append(stat.S_IMODE(path.stat().st_mode))
    return FileEntry(name, source, stable_hash(members, 64), tuple(members), tuple(modes))


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
    try:
        now = [(rel, digest) for rel, digest in scan(str(entry.source), entry.source.parent).members]
    except ValueError as e:
        raise Changed(f"workload files under {entry.source}: {e}") from None
    if now != list(entry.members):
        raise Changed(f"workload files under {entry.source} changed since the matrix was read (files added, removed "
                      "or edited); run again to measure the new version")


def folder_name(entries: tuple[FileEntry, ...]) -> str:
    """files-<hash of every entry>: the same files give the same folder, wherever they are placed."""
    return "files-" + stable_hash({e.name: e.digest for e in entries})


def manifest(entries: tuple[FileEntry, ...]) -> bytes:
    """The manifest the launcher copies each repeat's files from: path, sha256 and mode of every member."""
    rows = [[rel, digest, e.modes[i] if i < len(e.modes) else 0o644]
            for e in entries for i, (rel, digest) in enumerate(e.members)]
    return json.dumps({"members": rows}, sort_keys=True, separators=(",", ":")).encode()


def manifest_digest(entries: tuple[FileEntry, ...]) -> str:
    return hashlib.sha256(manifest(entries)).hexdigest()


def _placed_mode(mode: int, for_all: bool = False) -> int:
    """The master's mode of a member: read-only, executable as it was, and readable by whom the member is
    (0600 -> 0400, 0644 -> 0444): a file not readable by group or others stays so. `for_all`: readable by all,
    for a container whose user matrix cannot name by id (its files are seen inside the container only). The
    member's own mode is in the manifest, restored in each repeat's copy."""
    return ((mode | 0o444) if for_all else mode) & 0o555


def _intact(target: Path, entries: tuple[FileEntry, ...]) -> bool:
    """Whether a placed folder still holds exactly the hashed bytes (checked on every reuse)."""
    try:
        if (target / MANIFEST).read_bytes() != manifest(entries):
            return False
        return all(_sha256(target / rel) == digest for e in entries for rel, digest in e.members)
    except OSError:
        return False


def stage(entries: tuple[FileEntry, ...], parent: Path) -> Path:
    """The files in parent/files-HASH (written once, atomically; reused when complete and every member's hash
    still holds, placed again when not). Made in a new private folder (0700, not a name anyone can plant a link
    at) and renamed into place; a link, a file or another user's folder at files-HASH is refused (UnsafePath, an
    OSError: the repeat's outcome says it). Raises Changed."""
    target = parent / folder_name(entries)
    parent.mkdir(parents=True, exist_ok=True)
    safewrite.check(target, folder=True)
    if (target / ".complete").exists():
        if _intact(target, entries):
            return target
        _remove(target)  # altered since it was placed (by a program run as root, say): placed again
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=parent))
    try:
        for entry in entries:
            if entry.source.is_dir():
                _check_members(entry)
            for i, (rel, _) in enumerate(entry.members):
                dest = tmp / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                safewrite.write_bytes(dest, _read(entry, rel), mode=0o600)
                dest.chmod(_placed_mode(entry.modes[i] if i < len(entry.modes) else 0o644))
        safewrite.write_bytes(tmp / MANIFEST, manifest(entries), mode=0o444)
        safewrite.write_bytes(tmp / ".complete", b"", mode=0o444)
        tmp.chmod(_folder_mode(tmp))  # the folder as any the user makes; the files as restricted as their sources
        try:
            os.replace(tmp, target)
        except OSError:
            if not (target / ".complete").exists():  # another process placed it first: theirs is the same
                raise
    finally:
        _remove(tmp)
    return target


def _folder_mode(inside: Path) -> int:
    """The mode a new folder gets under this process's umask (os.umask would change it for every thread)."""
    probe = inside / ".mode"
    probe.mkdir()
    try:
        return stat.S_IMODE(probe.stat().st_mode)
    finally:
        probe.rmdir()


def _remove(folder: Path) -> None:
    """Remove a placed folder (its files are read-only, its folders are not: rmtree can unlink them)."""
    shutil.rmtree(folder, ignore_errors=True)


def owner_ids(user: str | None) -> tuple[int, int] | None:
    """The (uid, gid) a container's `user:` names: none given is root, "UID" or "UID:GID" as numbers; None for a
    user given by name, whose id only the image knows."""
    if not user:
        return 0, 0
    uid, _, gid = user.partition(":")
    if uid.isdigit() and (not gid or gid.isdigit()):
        return int(uid), int(gid or 0)
    return None


def tar_members(entries: tuple[FileEntry, ...], inside: str, tar: tarfile.TarFile, mtime: float,
                owner: tuple[int, int] | None = (0, 0)) -> None:
    """Add the files under `inside`/files-HASH, with their manifest, to a tar for put_archive. The master is owned
    by `owner` (the user the launcher runs as) with its members' restricted modes; a user known by name only
    (owner None) gets a master readable by all inside the container. Raises Changed."""
    root = f"{inside.strip('/')}/{folder_name(entries)}"
    made: set[str] = set()
    uid, gid = owner or (0, 0)

    def add(name: str, data: bytes, mode: int) -> None:
        parts = name.split("/")
        for depth in range(len(inside.strip("/").split("/")) + 1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in made:
                made.add(folder)
                info = tarfile.TarInfo(folder)
                info.type, info.mode, info.mtime, info.uid, info.gid = tarfile.DIRTYPE, 0o755, mtime, uid, gid
                tar.addfile(info)
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime, info.uid, info.gid = len(data), mode, mtime, uid, gid
        tar.addfile(info, io.BytesIO(data))

    for entry in entries:
        if entry.source.is_dir():
            _check_members(entry)
        for i, (rel, _) in enumerate(entry.members):
            mode = entry.modes[i] if i < len(entry.modes) else 0o644
            add(f"{root}/{rel}", _read(entry, rel), _placed_mode(mode, for_all=owner is None))
    add(f"{root}/{MANIFEST}", manifest(entries), 0o444)
