"""Per-rank plumbing shared by the backends: rank files, the grace period after one rank fails,
and the merge of the ranks' logs into one outcome.

A repeat with `gpus: N` is N processes (ranks). Each writes `<stem>.rank<R>.out` (stdout, where
rank 0 prints the MATRIX_RESULT line) and `<stem>.rank<R>.log` (stderr). Local and docker start
the ranks from here; the slurm batch script writes the same names on the nodes.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Literal, Protocol

from runner.base import safewrite
from runner.domain.outcomes import Outcome, Status

# After one rank failed, the others get this long to end by themselves: they may wait forever in a
# collective otherwise.
RANK_GRACE_S = 10.0
OTHER_RANK_CHARS = 1500  # how much of each other rank's log joins rank 0's in the log tail
POLL_S = 0.5

Ended = Literal["timeout", "stop", "rank"]


class Rank(Protocol):
    """A running rank, however it was started (a local process, a `docker exec`)."""

    def poll(self) -> tuple[bool, int | None]:
        """(whether it ended, its exit status when known)."""

    def wait(self, timeout: float) -> None:
        """Block until it ends or `timeout` seconds passed."""


def rank_file(stem: Path, rank: int, kind: Literal["out", "log"]) -> Path:
    return Path(f"{stem}.rank{rank}.{kind}")


@contextlib.contextmanager
def rank_files(stem: Path, world: int) -> Iterator[list[tuple[IO[bytes], IO[bytes]]]]:
    """(stdout, stderr) files of every rank, open for writing, closed on the way out: new files (safewrite), so
    a link planted at a rank's name is refused, never written through (and its target never truncated)."""
    with contextlib.ExitStack() as stack:
        yield [(stack.enter_context(safewrite.create(rank_file(stem, r, "out"))),
                stack.enter_context(safewrite.create(rank_file(stem, r, "log")))) for r in range(world)]


def wait_ranks(ranks: Sequence[Rank], deadline: float, stop: threading.Event | None = None,
               grace: float = RANK_GRACE_S) -> Ended | None:
    """Wait until every rank ended (None), or say why waiting stopped: the deadline passed
    ("timeout"), a stop was asked ("stop"), or a rank failed and the others outlived the grace
    period ("rank"). The caller kills what still runs."""
    failed_at: float | None = None
    while True:
        states = [r.poll() for r in ranks]
        running = [r for r, (done, _) in zip(ranks, states, strict=True) if not done]
        if not running:
            return None
        if stop is not None and stop.is_set():
            return "stop"
        now = time.time()
        if now >= deadline:
            return "timeout"
        if failed_at is None and any(done and code not in (0, None) for done, code in states):
            failed_at = now
        if failed_at is not None and now - failed_at > grace:
            return "rank"
        running[0].wait(min(POLL_S, max(0.0, deadline - now)))


def rank_env(base: dict[str, str], rank: int, world: int, port: int) -> dict[str, str]:
    """The env:// variables torch.distributed reads, for one rank of a one-host repeat."""
    env = dict(base)
    if world > 1:
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        # One host: keep gloo on loopback rather than whatever the hostname resolves to
        # (a Docker bridge coming and going must not break a CPU run).
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    return env


def merge_logs(rank0: str, others: Sequence[str]) -> str:
    """Rank 0's log, then the end of every other rank's log that says anything."""
    log = rank0
    for rank, text in enumerate(others, start=1):
        cut = text[-OTHER_RANK_CHARS:]
        if cut.strip():
            log += f"\n--- rank {rank} ---\n{cut}"
    return log


def read_text(path: Path) -> str:
    """A rank's file as text; empty when it was never written."""
    try:
        return path.read_text(errors="replace")
    except (FileNotFoundError, IsADirectoryError):
        return ""


def read_ranks(stem: Path, world: int | None = None) -> tuple[str, str]:
    """(rank 0's stdout, the merged log) from the rank files; world None: every rank found."""
    if world is None:
        found = [int(p.name.rsplit(".rank", 1)[1].split(".")[0]) for p in stem.parent.glob(f"{stem.name}.rank*.log")
                 if p.name.rsplit(".rank", 1)[1].split(".")[0].isdigit()]
        world = max(found, default=0) + 1
    others = [read_text(rank_file(stem, r, "log")) for r in range(1, world)]
    return read_text(rank_file(stem, 0, "out")), merge_logs(read_text(rank_file(stem, 0, "log")), others)


def settle(outcome: Outcome, ended: Ended | None, codes: Sequence[int | None], timeout: float,
           where: str = "") -> Outcome:
    """The repeat's outcome from rank 0's, given how the wait ended and every rank's exit status."""
    now = time.time()
    if ended == "timeout":
        return replace(outcome, status=Status.TIMEOUT, result=None, finished_at=now,
                       reason=f"exceeded the timeout of {timeout:g} s and was killed{where}")
    if ended == "stop":
        return replace(outcome, status=Status.CANCELLED, result=None, reason="stopped (Ctrl-C)", finished_at=now)
    bad = next((c for c in codes[1:] if c != 0), None)
    if bad is not None and (ended == "rank" or codes[0] == 0):
        return replace(outcome, status=Status.FAILED, finished_at=now,
                       reason=f"a non-zero rank exited with status {bad}")
    return outcome


def cancelled(outcome: Outcome, reason: str = "interrupted (Ctrl-C)") -> Outcome:
    """What Ctrl-C leaves of a repeat: its log, no result."""
    return replace(outcome, status=Status.CANCELLED, result=None, reason=reason, finished_at=time.time())


__all__ = ["RANK_GRACE_S", "Ended", "Rank", "cancelled", "merge_logs", "rank_file", "rank_files", "read_ranks",
           "rank_env", "read_text", "settle", "wait_ranks"]
