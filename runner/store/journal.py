"""The journal: results a full disk kept out of the store, as JSON lines beside it (or in a folder of the
user's own, mode 0700), imported by the next process that writes the store.

What is imported becomes results that verdicts are drawn from, so a journal is trusted only where no one
else can have written it: a regular file of one name (not a link, symbolic or hard) of the store's owner or this user, writable by no
one else, and, away from the store, in a folder of this user's that no one else may enter. Never a shared
folder such as /tmp, where another user could plant rows or a file the owner cannot remove.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

JOURNAL_SCHEMA = 1


def _private_folders() -> list[Path]:
    """This user's folders for journals away from the store: the state folder, else one in the temporary
    folder named after the user id (created 0700 and checked, as a shared /tmp may hold a planted one)."""
    state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "matrix" / "journal"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return [state, Path(tempfile.gettempdir()) / f"matrix-{uid}" / "journal"]


def paths(db: Path) -> list[Path]:
    """Where a result that the store cannot take is kept, in the order tried: beside the store, then in
    this user's own folders (named after the store's absolute path)."""
    digest = hashlib.sha256(str(db.resolve()).encode()).hexdigest()[:16]
    name = f"{db.name}-{digest}.journal"
    return [db.with_name(db.name + ".journal"), *(folder / name for folder in _private_folders())]


def _owners(db: Path) -> set[int]:
    owners = {os.getuid()} if hasattr(os, "getuid") else set()
    try:
        owners.add(db.stat().st_uid)
    except OSError:
        pass
    return owners


def refused(path: Path, db: Path) -> str | None:
    """Why the journal at `path` cannot be trusted (someone else may have written it), or None."""
    if not hasattr(os, "getuid"):
        return None
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be examined ({e.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_nlink > 1:  # another name of a file elsewhere (linked in where others may write): not a journal's own
        return f"it has {st.st_nlink} names (a hard link to a file elsewhere)"
    if st.st_uid not in _owners(db):
        return f"it belongs to user id {st.st_uid}, not to this user or the store's owner"
    if st.st_mode & 0o022:
        return f"others may write it (mode {stat.S_IMODE(st.st_mode):04o})"
    if path != paths(db)[0]:
        try:
            folder = path.parent.lstat()
        except OSError as e:
            return f"its folder cannot be examined ({e.strerror})"
        if stat.S_ISLNK(folder.st_mode) or folder.st_uid != os.getuid() or folder.st_mode & 0o077:
            return f"its folder {path.parent} is not this user's own (owner {folder.st_uid}, mode " \
                   f"{stat.S_IMODE(folder.st_mode):04o}, 0700 expected)"
    return None


def _make_private(folder: Path) -> None:
    """Create folder 0700 and check that it is this user's own, not a link or a folder others may enter."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = folder.lstat()
    if stat.S_ISLNK(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise PermissionError(errno.EPERM, "not this user's own folder", str(folder))
    if st.st_mode & 0o077:
        os.chmod(folder, 0o700)


def set_aside(path: Path) -> Path | None:
    """Move a journal that cannot be imported out of the way (so it blocks no later run); None if it cannot be."""
    aside = path.with_name(f"{path.name}.refused-{int(time.time())}")
    try:
        os.replace(path, aside)
    except OSError:
        return None
    return aside


def waiting(db: Path) -> list[Path]:
    """The journals of this store that hold something and can be trusted."""
    found = []
    for p in paths(db):
        try:
            if p.stat().st_size and refused(p, db) is None:
                found.append(p)
        except OSError:
            continue
    return found


def keep(db: Path, line: str) -> Path | None:
    """Append one JSON line to the first journal that takes it; None when none does."""
    for i, path in enumerate(paths(db)):
        try:
            if i:
                _make_private(path.parent)
            if refused(path, db):
                continue
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
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT) if "a" in mode else os.O_RDWR
        # Never through a link planted in the journal's place, never waiting on a FIFO put there after it was
        # checked; created readable by this user only. What was opened is checked again (a regular file, one name).
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0), 0o600)
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or opened.st_nlink > 1:
            os.close(fd)
            raise PermissionError(errno.EPERM, "not a regular file of one name: not a journal", str(path))
        f = os.fdopen(fd, mode)
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
