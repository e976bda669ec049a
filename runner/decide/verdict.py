"""One verdict type for every decision matrix makes (the gate, references, compare's significance, bisect):
pass, fail or undecided. Undecided is never reported as passed; a command fails closed on it
(exit status 5) unless the user asks otherwise with `--undecided pass` (or `fail`)."""

from __future__ import annotations

from enum import Enum

from runner.errors import ConfigError
from runner.exitcodes import Exit


class Verdict(str, Enum):
    PASS = "pass"
    FAIL = "fail"
    UNDECIDED = "undecided"


UNDECIDED_POLICIES = ("error", "fail", "pass")  # error: exit 5; fail: count as failed (1); pass: count as passed


def parse_policy(value: str | None) -> str:
    """`--undecided` value -> one of UNDECIDED_POLICIES (default: error, i.e. fail closed with exit 5)."""
    if value is None:
        return "error"
    if value not in UNDECIDED_POLICIES:
        raise ConfigError(f"--undecided {value!r}: allowed: {', '.join(UNDECIDED_POLICIES)} (default: error, "
                          "exit status 5 when a decision is undecided)")
    return value


def exit_status(verdicts: list[Verdict], policy: str = "error") -> Exit:
    """The exit status of a decision over many verdicts: any fail -> 1; else any undecided -> by policy."""
    if Verdict.FAIL in verdicts:
        return Exit.FAILED
    if Verdict.UNDECIDED in verdicts:
        return {"error": Exit.UNDECIDED, "fail": Exit.FAILED, "pass": Exit.OK}[policy]
    return Exit.OK
