"""What one repeat produced: a status, the bench JSON and the log tail."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from runner.domain.bench_contract import (
    EXIT_DIVERGED,
    EXIT_OOM,
    EXIT_UNSUPPORTED,
    RESULT_EXITS,
    RESULT_PREFIX,
)
from runner.domain.bench_contract import SCHEMA as BENCH_SCHEMA

LOG_TAIL_CHARS = 4000


class Status(str, Enum):
    OK = "ok"
    OOM = "oom"
    # The training did not stay finite (a NaN or infinite loss in the warm-up or the window): its figures are
    # kept for the record and never ranked (runner/record/admission.py).
    DIVERGED = "diverged"
    UNSUPPORTED = "unsupported"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"
    # The environment could not start (image missing, no GPU runtime, unknown partition): nothing was
    # measured, so the next run tries again by default.
    NOT_STARTED = "not_started"
    # Never stored: admission's word (runner/record/admission.py) for a stored `ok` repeat it does not admit (a
    # window shorter than promised, a figure no machine reaches, a loss scaler that skipped most steps).
    REFUSED = "refused"

    @property
    def final(self) -> bool:
        """A final status counts as measured: resume does not run it again by default."""
        return self not in (Status.CANCELLED, Status.NOT_STARTED)

    @property
    def succeeded(self) -> bool:
        """Whether the repeat ended as it should: `matrix run` exits non-zero for any other status."""
        return self in (Status.OK, Status.UNSUPPORTED, Status.SKIPPED)


# What `matrix run --rerun-failed` measures again besides what a plain run does (cancelled, not_started).
RERUN_FAILED = frozenset({Status.FAILED, Status.OOM, Status.DIVERGED, Status.REFUSED, Status.TIMEOUT,
                          Status.CANCELLED})
RERUN_FAILED_TEXT = "failed, oom, diverged, refused and timed-out"  # tests/domain/test_results.py checks it against RERUN_FAILED


@dataclass(frozen=True)
class Outcome:
    status: Status
    result: dict[str, Any] | None = None
    log_tail: str = ""
    reason: str = ""
    started_at: float = field(default_factory=time.time)
    finished_at: float = field(default_factory=time.time)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, Any]:
        return dict((self.result or {}).get("metrics") or {})

    @property
    def env(self) -> dict[str, Any]:
        env = dict((self.result or {}).get("env") or {})
        if self.result and self.result.get("precision"):
            env["precision_flags"] = self.result["precision"]
        env.update(self.extra)
        return env


def tail(text: str, limit: int = LOG_TAIL_CHARS) -> str:
    """The last `limit` characters, cut at a line start where possible."""
    if len(text) <= limit:
        return text
    cut = text[-limit:]
    nl = cut.find("\n")
    return cut[nl + 1 :] if 0 <= nl < 200 else cut


def parse_result_line(stdout: str) -> dict[str, Any] | None:
    """The last MATRIX_RESULT line of a process's output, decoded; None if there is none."""
    found = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith(RESULT_PREFIX):
            try:
                found = json.loads(line[len(RESULT_PREFIX) :])
            except json.JSONDecodeError:
                continue
    return found


def outcome_from_process(
    stdout: str,
    log: str,
    returncode: int | None,
    started_at: float,
    finished_at: float,
    extra: dict[str, Any] | None = None,
) -> Outcome:
    """Turn a finished bench process into an Outcome: the JSON line wins, else the exit status."""
    result = parse_result_line(stdout)
    log_tail = tail(log)
    extra = extra or {}
    if result is not None and result.get("schema") != BENCH_SCHEMA:
        return Outcome(Status.FAILED, result, log_tail,
                       f"bench result schema {result.get('schema')!r}, this matrix reads {BENCH_SCHEMA}: "
                       "run the benchmark shipped with this version of matrix",
                       started_at, finished_at, extra)
    if result is not None:
        try:
            status = Status(result.get("status", "failed"))
        except ValueError:
            status = Status.FAILED
        if returncode not in (*RESULT_EXITS, None) and status is Status.OK:
            status = Status.FAILED
        elif returncode == EXIT_DIVERGED and status is Status.OK:
            status = Status.DIVERGED  # the exit status says the training did not stay finite: the worse word wins
        reason = result.get("reason") or ("" if status is Status.OK else f"exit status {returncode}")
        return Outcome(status, result, log_tail, reason, started_at, finished_at, extra)
    if returncode == EXIT_OOM:
        status, reason = Status.OOM, "out of memory"
    elif returncode == EXIT_UNSUPPORTED:
        status, reason = Status.UNSUPPORTED, "unsupported"
    elif returncode == EXIT_DIVERGED:
        status, reason = Status.DIVERGED, "the loss became NaN or infinite"
    else:
        status = Status.FAILED
        last = [ln for ln in log.strip().splitlines() if ln.strip()]
        reason = (last[-1][:300] if last else "") or f"exit status {returncode}"
        if returncode is not None and returncode < 0:
            reason = f"killed by signal {-returncode}" + (f": {reason}" if last else "")
    return Outcome(status, None, log_tail, reason, started_at, finished_at, extra)
