"""Whether the process behind a run is alive: by its pid on this host, by its heartbeat elsewhere
(docs/internals.md, "Concurrent runs")."""

from __future__ import annotations

import os
import socket
import sqlite3
import threading
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

# A holder on another host (or in another container) is alive while its heartbeat is younger than this;
# one on this host is alive while its process is.
LEASE_S = 60.0
HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class Holder:
    """The process behind a run, as `holders` keeps it."""

    run_id: str
    host: str
    ident: str
    pid: int
    pid_start: str | None
    started_at: float
    heartbeat: float
    ended_at: float | None

    def alive(self, now: float | None = None) -> bool:
        """On this host (same kernel boot and process namespace): while its process lives. Elsewhere:
        while its heartbeat is younger than LEASE_S."""
        if self.ended_at is not None:
            return False
        me = this_process()
        if self.host == me.host and self.ident == me.ident and self.ident:
            return _pid_alive(self.pid, self.pid_start)
        return (now if now is not None else time.time()) - self.heartbeat < LEASE_S

    def describe(self) -> str:
        return (f"run {self.run_id} (pid {self.pid} on {self.host}, started "
                f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started_at))})")


@dataclass(frozen=True)
class Process:
    host: str
    ident: str    # kernel boot and pid namespace: a pid means the same process only where these match
    pid: int
    start: str | None


def this_process() -> Process:
    pid = os.getpid()
    return Process(socket.gethostname(), IDENT, pid, _proc_start(pid))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _ident() -> str:
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    boot = _read("/proc/sys/kernel/random/boot_id")
    return f"{boot}/{ns}" if boot or ns else ""


IDENT = _ident()
# The machine whose processors a measurement uses: the kernel's boot id, which containers on one host share
# (their host names and pid namespaces differ); the host name where there is no boot id.
MACHINE = _read("/proc/sys/kernel/random/boot_id") or socket.gethostname()


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of a process, from /proc; None where there is none."""
    text = _read(f"/proc/{pid}/stat")
    if ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _proc_start(pid: int) -> str | None:
    stat = _proc_stat(pid)
    return stat[1] if stat else None


def _pid_alive(pid: int, start: str | None) -> bool:
    """Whether that process still runs: it exists, is not a zombie, and started when it did (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except OSError:
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return True
    return stat[0] not in ("Z", "X") and (start is None or stat[1] == start)


class Heartbeat:
    """Tells other hosts that a run is alive: its holder row's heartbeat, every HEARTBEAT_S, on its own
    connection (a repeat may take longer than the lease)."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path, self.run_id = path, run_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-{run_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        try:
            db = sqlite3.connect(self.path, timeout=HEARTBEAT_S / 2, isolation_level=None)
        except sqlite3.Error:
            return
        with closing(db):
            while not self._stop.wait(HEARTBEAT_S):
                try:
                    db.execute("UPDATE holders SET heartbeat=? WHERE run_id=?", (time.time(), self.run_id))
                except sqlite3.Error:
                    continue  # busy or full: the next beat tries again; the lease is several beats long
