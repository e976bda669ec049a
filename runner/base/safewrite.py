"""Every file matrix writes, written so that nothing planted at its name is followed or overwritten.

The content is created exclusively (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600 or the one asked, under the umask) in
a private folder (0700, a new name) made inside the destination's folder, then renamed onto its name: a rename
replaces a name and never writes through it, a reader sees the old file or the new one, never half of one, and
of two writers at once the last leaves its whole file. The destination's folder is opened once and every step
is taken relative to it, so a folder swapped for a link half-way changes nothing.

What is at the name already decides: nothing, or a regular file of this user's, is replaced; a symbolic link,
anything that is not a regular file (a FIFO, a device, a folder, a socket) and another user's file are refused
in one line (UnsafePath: a StoreError, exit 6), before anything is written and again just before the rename.
The destination is never opened, so a FIFO there cannot block.

The bottom floor (docs/architecture.md): it imports nothing of runner but errors.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from runner.base.errors import StoreError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
PRIVATE_PREFIX = ".matrix-write-"  # the private folders' names: .matrix-write-<16 hex digits>.tmp
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


class UnsafePath(StoreError, OSError):
    """A name matrix will not write (a link, not a regular file, another user's file) or read (not a regular
    file). An OSError too, so a writer that falls back on a failed write (the zipapp's cache) or reports one as
    a repeat's outcome (a workload's files) treats it as it treats any other."""


def _uid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def kind(st: os.stat_result) -> str | None:
    """What a file is when it is not a regular one ("a FIFO", "a folder", ...), from lstat; None for a regular file."""
    if stat.S_ISLNK(st.st_mode):
        return "a symbolic link"
    return next((word for test, word in _KINDS if test(st.st_mode)), None if stat.S_ISREG(st.st_mode) else "not a file")


def problem(path: Path, st: os.stat_result | None, foreign_ok: bool = False, folder: bool = False) -> str | None:
    """Why what lstat found at `path` must not be replaced, as the end of a sentence; None when it may be.
    `folder`: a folder of matrix's own is expected there (the site's cells/), not a file."""
    if st is None:
        return None
    what = kind(st)
    if folder and what == "a folder":
        what = None
    if what == "a symbolic link":
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        return (f"is a symbolic link (to {target}): matrix never writes through a link or over one; remove the "
                "link, or pass another path")
    if what is not None:
        return f"is {what}, not a regular file: matrix writes only regular files; remove it, or pass another path"
    uid = _uid()
    if not foreign_ok and uid is not None and st.st_uid != uid:
        return (f"belongs to user id {st.st_uid}, not to this user: matrix does not replace another user's file; "
                "remove it (or ask its owner to), or pass another path")
    return None


def _lstat_at(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def check(path: Path, foreign_ok: bool = False, folder: bool = False) -> None:
    """Refuse (UnsafePath) what is at `path` when a write must not replace it; nothing there is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    why = problem(path, st, foreign_ok, folder)
    if why:
        raise UnsafePath(f"{path} {why}")


def _check_at(folder: int, path: Path) -> None:
    why = problem(path, _lstat_at(folder, path.name))
    if why:
        raise UnsafePath(f"{path} {why}")


def folder(path: Path, mode: int = 0o777) -> Path:
    """A folder of matrix's own at `path` (made with its parents when missing); a link or a file in its place is
    refused: what is written into it would land wherever the link points."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(parents=True, exist_ok=True, mode=mode)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        what = kind(st) or "a file"
        if what == "a symbolic link":
            what += f" (to {os.readlink(path)})"
        raise UnsafePath(f"{path} is {what}, where matrix makes a folder of its own: remove it, or pass another path")
    return path


class _Private:
    """A new 0700 folder inside the destination's folder, opened without following a link, holding one file."""

    def __init__(self, parent: int) -> None:
        self.parent = parent
        while True:
            self.name = f"{PRIVATE_PREFIX}{secrets.token_hex(8)}.tmp"
            try:
                os.mkdir(self.name, 0o700, dir_fd=parent)
                break
            except FileExistsError:
                continue
        try:
            self.fd = os.open(self.name, os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC, dir_fd=parent)
        except OSError:
            self._rmdir()
            raise
        uid = _uid()
        if uid is not None and os.fstat(self.fd).st_uid != uid:  # swapped for another's folder meanwhile
            os.close(self.fd)
            raise UnsafePath(f"the private folder {self.name} was replaced while matrix wrote into it")

    def create(self, name: str, mode: int) -> int:
        return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=self.fd)

    def close(self, name: str) -> None:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)
        os.close(self.fd)
        self._rmdir()

    def _rmdir(self) -> None:
        with contextlib.suppress(OSError):
            os.rmdir(self.name, dir_fd=self.parent)


def _open_folder(path: Path) -> int:
    return os.open(str(path.parent), os.O_RDONLY | _DIRECTORY | _CLOEXEC)


@contextlib.contextmanager
def replacing(path: Path, mode: int = 0o600) -> Iterator[BinaryIO]:
    """A new file, open for writing, that becomes `path` when the block ends without an error; on an error
    nothing at `path` changes and nothing is left behind. Refuses (UnsafePath) what `problem` names."""
    parent = _open_folder(path)
    try:
        _check_at(parent, path)
        private = _Private(parent)
        try:
            with os.fdopen(private.create(path.name, mode), "wb") as f:
                yield f
            _check_at(parent, path)  # again: a link or a FIFO planted while the content was written
            os.replace(path.name, path.name, src_dir_fd=private.fd, dst_dir_fd=parent)
        finally:
            private.close(path.name)
    finally:
        os.close(parent)


def write_bytes(path: Path, data: bytes, mode: int = 0o600) -> Path:
    """`data` as the file `path`, replaced whole (see `replacing`)."""
    with replacing(path, mode) as f:
        f.write(data)
    return path


def write_text(path: Path, text: str, mode: int = 0o600, encoding: str = "utf-8") -> Path:
    return write_bytes(path, text.encode(encoding), mode)


def create(path: Path, mode: int = 0o600) -> BinaryIO:
    """A new, empty file at `path`, open for writing (a log a process streams into): made as `replacing` makes
    one and put in place at once; the caller closes it."""
    parent = _open_folder(path)
    try:
        _check_at(parent, path)
        private = _Private(parent)
        try:
            f = os.fdopen(private.create(path.name, mode), "wb")
            try:
                _check_at(parent, path)
                os.replace(path.name, path.name, src_dir_fd=private.fd, dst_dir_fd=parent)
            except BaseException:
                f.close()
                raise
        finally:
            private.close(path.name)
    finally:
        os.close(parent)
    return f


def appending(path: Path, mode: int = 0o600) -> TextIO:
    """`path` open for appending text (a log kept across calls), created when missing: never through a link
    (O_NOFOLLOW), never waiting on a FIFO (O_NONBLOCK), only a regular file of this user's (UnsafePath else)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, mode)
    except OSError:
        check(path)  # a link (ELOOP) or a FIFO without a reader (ENXIO): said as what it is
        raise
    why = problem(path, os.fstat(fd))
    if why:
        os.close(fd)
        raise UnsafePath(f"{path} {why}")
    return os.fdopen(fd, "a", encoding="utf-8")


def open_regular(path: Path, hint: str = "pass a file", nofollow: bool = False) -> BinaryIO:
    """`path` open for reading when it is a regular file; anything else (a FIFO, a device, a folder) is refused
    (UnsafePath) without blocking: it is opened with O_NONBLOCK (a FIFO opened plainly waits for a writer) and
    what was opened is what is checked. `nofollow`: a link at `path` is not opened either (ELOOP)."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC | (_NOFOLLOW if nofollow else 0))
    what = kind(os.fstat(fd))
    if what is not None:
        os.close(fd)
        raise UnsafePath(f"{path} is {what}, not a regular file: {hint}")
    return os.fdopen(fd, "rb")
