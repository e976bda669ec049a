"""The identity of a file or directory image (a SIF, a SquashFS file, a Charliecloud directory), taken by
the controller when it submits a job: the sha256 of the file, or of the directory tree (every entry's
path, type, mode and content, in order). Reading a multi-GB image takes seconds, so a hash is kept in
a small cache file and reused while the image is unchanged: same size and modification time for a
file; the same listing (paths, sizes, times) for a directory.

The node compares the image's size and time with the ones hashed here (check.sh.j2's `file_image`), so
an image replaced between submission and start is recorded as changed, never under the old hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from runner.backends.containers.base import ImageIdentity
from runner.base import safewrite

CHUNK = 1 << 20
CACHE_SCHEMA = 1
CACHE_KEEP = 200  # hashes kept in the cache file, the latest ones


def image_identity(path: str, cache: Path | None = None) -> ImageIdentity:
    """The image's hash as seen from here, or why there is none (not visible here, unreadable)."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError as e:
        return ImageIdentity(problem=f"not visible from the controller ({e.strerror}): its identity is not recorded")
    now = f"{st.st_size} {int(st.st_mtime)}"
    try:
        if stat.S_ISDIR(st.st_mode):
            entries = _entries(p)
            key = f"dir:{p.resolve()}:{hashlib.sha256(_listing(entries).encode()).hexdigest()}"
            digest = _cached(cache, key) or _remember(cache, key, _tree_hash(p, entries))
            return ImageIdentity(sha256=digest, what="directory tree", stat=now)
        key = f"file:{p.resolve()}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"
        digest = _cached(cache, key) or _remember(cache, key, file_hash(p))
        return ImageIdentity(sha256=digest, what="file", stat=now)
    except OSError as e:
        return ImageIdentity(problem=f"cannot be read from the controller ({e}): its identity is not recorded")


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _entries(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under root with its lstat, sorted by path (os.scandir: one stat per entry)."""
    out: list[tuple[str, os.stat_result]] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                path = f"{rel}/{entry.name}" if rel else entry.name
                out.append((path, st))
                if stat.S_ISDIR(st.st_mode):
                    stack.append(path)
    out.sort(key=lambda e: e[0])
    return out


def _listing(entries: list[tuple[str, os.stat_result]]) -> str:
    """Paths, modes, sizes and modification times: cheap, and changes when any file does."""
    return "\n".join(f"{rel}\t{st.st_mode:o}\t{st.st_size}\t{st.st_mtime_ns}" for rel, st in entries)


def _tree_hash(root: Path, entries: list[tuple[str, os.stat_result]]) -> str:
    """sha256 over every entry's path, type and mode, and each file's content or link's target."""
    h = hashlib.sha256()
    for rel, st in entries:
        if stat.S_ISREG(st.st_mode):
            what = file_hash(root / rel)
        elif stat.S_ISLNK(st.st_mode):
            what = os.readlink(root / rel)
        else:
            what = ""
        h.update(f"{rel}\0{stat.S_IFMT(st.st_mode):o}\0{stat.S_IMODE(st.st_mode):o}\0{what}\n".encode())
    return h.hexdigest()


def _load(cache: Path) -> dict[str, Any]:
    try:
        with safewrite.open_regular(cache, nofollow=True) as f:  # a FIFO or a link there: no cache
            data = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA or not isinstance(data.get("hashes"), dict):
        return {}  # another version's or a damaged cache: hash again
    return data["hashes"]


def _cached(cache: Path | None, key: str) -> str | None:
    if cache is None:
        return None
    value = _load(cache).get(key)
    return value if isinstance(value, str) and len(value) == 64 else None


def _remember(cache: Path | None, key: str, digest: str) -> str:
    if cache is not None:
        hashes = _load(cache)
        hashes.pop(key, None)
        hashes[key] = digest
        hashes = dict(list(hashes.items())[-CACHE_KEEP:])
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            safewrite.write_text(cache, json.dumps({"schema": CACHE_SCHEMA, "hashes": hashes}, indent=1))
        except OSError:
            pass  # a cache that cannot be written (or holds a planted link: UnsafePath) only costs the next hash its time
    return digest
