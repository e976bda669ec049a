"""The journal: results a full disk kept out of the store, as JSON lines beside it (or in the user's
state folder, or the temporary folder), imported by the next process that writes the store."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JOURNAL_SCHEMA = 1


def paths(db: Path) -> list[Path]:
    """Where a result that the store cannot take is kept, in the order tried: beside the store, then in
    the user's state folder and the temporary folder (named after the store's absolute path)."""
    digest = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:16]
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "matrix" / "journal"
    name = f"{db.name}-{digest}.journal"
    return [db.with_name(db.name + ".journal"), state / name, Path(tempfile.gettempdir()) / name]


def waiting(db: Path) -> list[Path]:
    """The journals of this store that hold something."""
    found = []
    for p in paths(db):
        try:
            if p.stat().st_size:
                found.append(p)
        except OSError:
            continue
    return found


def keep(db: Path, line: str) -> Path | None:
    """Append one JSON line to the first journal that takes it; None when none does."""
    for path in paths(db):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with locked(path, "a") as f:
                size = f.seek(0, os.SEEK_END)
                try:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
                except OSError:
                    f.truncate(size)  # no half line; and no empty journal left behind
                    if size == 0:
                        path.unlink()
                    raise
            return path
        except OSError:
            continue
    return None


@contextmanager
def locked(path: Path, mode: str) -> Iterator[Any]:
    """A journal file under an exclusive lock: writers append and importers read-and-remove it one at a time.
    A writer that waited while an importer removed the file opens it again (its own copy would be lost)."""
    while True:
        f = open(path, mode)
        try:
            try:
                import fcntl
                fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            except ImportError:  # not on POSIX: no lock
                pass
            try:
                same = os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
            except FileNotFoundError:
                same = False
            if same:
                yield f
                return
        finally:
            f.close()
        if "a" not in mode:
            raise FileNotFoundError(errno.ENOENT, "removed meanwhile", str(path))
