"""Text made in a forked child while the process goes on: a report writes repeats.csv (half a second for 10,000
repeats) from the frame alone, so the text is made on the second core while the report builds its views, and the
report takes it when it writes the file.

The child is forked only where that is safe and useful: Linux, a process with no other thread (a fork
copies only the thread that calls it, so a lock another thread held would stay held in the child), and a machine with
more than one CPU. Anywhere else, and whenever the child does not bring the whole text back (it failed, was killed,
ran out of memory), the text is made in the process when it is asked for, where an error reads as it always did: the
child changes when the work is done, never what it makes. The child writes nothing but its pipe, and ends with
os._exit (no exit handler, no inherited buffer flushed twice). Ctrl-C and SIGTERM are held back across the fork: the
child ignores Ctrl-C (the parent's handler stops it, `close`) and ends at SIGTERM without the parent's handlers.

The pipe carries the text's length (8 bytes) and the text as UTF-8 with lone surrogates passed through, so the text
read back is the one made, character for character. The parent waits WAIT for a child's whole text, then stops it and
makes the text itself (a child stopped or stuck never holds the process).

The bottom floor (docs/architecture.md): standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Callable

_LENGTH = struct.Struct(">Q")
WAIT = 300.0  # seconds the process waits for one child's text before it stops the child and makes the text itself
_HELD = {signal.SIGINT, signal.SIGTERM}
_CHUNK = 1 << 20


def can_fork() -> bool:
    """Whether a child can be forked here safely and to any end: on Linux (macOS's system libraries are not safe to
    use in a forked child, which is why Python spawns there), with no other thread running, and a second CPU to run
    the child on."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and hasattr(signal, "pthread_sigmask")
            and threading.active_count() == 1 and (os.cpu_count() or 1) > 1)


class _Child:
    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd

    def take(self) -> str | None:
        """The child's text, or None where it did not bring all of it within WAIT; the child is reaped either way."""
        try:
            deadline = time.monotonic() + WAIT
            data = bytearray()
            size: int | None = None
            while size is None or len(data) < _LENGTH.size + size:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return None  # stopped or stuck: ended below, and the text is made in the process
                chunk = os.read(self.fd, _CHUNK)
                if not chunk:
                    return None
                data += chunk
                if size is None and len(data) >= _LENGTH.size:
                    (size,) = _LENGTH.unpack_from(data)
            if len(data) != _LENGTH.size + size:
                return None
            return bytes(data[_LENGTH.size:]).decode("utf-8", "surrogatepass")
        except (OSError, ValueError, MemoryError):
            return None
        finally:
            self.end()

    def end(self) -> None:
        """Close the pipe, stop the child where it still runs, reap it."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1
        if self.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self.pid, 0)
            self.pid = 0


class Aside:
    """Texts made in children, by name: `start(name, make)` forks a child that runs `make` (where `can_fork()`),
    `text(name, make)` returns the child's text, or `make()` run here where no child was started or none brought it
    back. Used as a context manager, every child still running at its end is stopped and reaped."""

    def __init__(self) -> None:
        self._children: dict[str, _Child] = {}

    def __enter__(self) -> Aside:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, name: str, make: Callable[[], str]) -> bool:
        """Make `name`'s text in a child from now on; False where none was forked (the text is made when asked)."""
        if name in self._children or not can_fork():
            return False
        try:
            r, w = os.pipe()
        except OSError:
            return False
        # Ctrl-C and SIGTERM held back across the fork: one that reached the child before it ignores them would
        # unwind the caller's code in the child (closing what the parent still uses).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            pid = os.fork()
        except OSError:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            os.close(r)
            os.close(w)
            return False
        if pid == 0:  # the child: make the text, write it, end; never return into the caller's code
            _run_child(r, w, make, held)
        os.close(w)
        self._children[name] = _Child(pid, r)  # known before a held Ctrl-C is let through: close() then ends it
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        return True

    def text(self, name: str, make: Callable[[], str]) -> str:
        """`name`'s text: the child's where one brought it whole, else `make()` here."""
        child = self._children.pop(name, None)
        found = child.take() if child is not None else None
        return found if found is not None else make()

    def close(self) -> None:
        for child in self._children.values():
            child.end()
        self._children.clear()

    @property
    def started(self) -> list[str]:
        """The names whose text a child is making."""
        return list(self._children)


def _run_child(r: int, w: int, make: Callable[[], str], held: set[int | signal.Signals]) -> None:
    code = 1
    try:
        # Ctrl-C is the parent's: it stops the child (Aside.close); SIGTERM ends the child as the system would, with
        # none of the parent's handlers. Set while both are held back, then let through.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        os.close(r)
        data = make().encode("utf-8", "surrogatepass")
        view = memoryview(_LENGTH.pack(len(data)) + data)
        while view:
            view = view[os.write(w, view[:_CHUNK]):]
        code = 0
    except BaseException:  # noqa: BLE001  (whatever happened, the parent makes the text itself)
        code = 1
    finally:
        os._exit(code)
