"""One verdict type for every decision matrix makes (the gate, references, compare's significance, bisect):
pass, fail or undecided. Undecided is never reported as passed; a command fails closed on it
(exit status 5) unless the user asks otherwise with `--undecided pass` (or `fail`)."""

from __future__ import annotations

from enum import Enum

from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit


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


def counted(verdict: Verdict, policy: str = "error") -> Verdict:
    """What a verdict counts as under an `--undecided` policy (pass and fail count as themselves); the
    output still says undecided, only the decision over many verdicts changes."""
    if verdict is Verdict.UNDECIDED and policy in ("fail", "pass"):
        return Verdict(policy)
    return verdict


def overall(verdicts: list[Verdict]) -> Verdict:
    """One verdict over many: fail if any failed, else undecided if any was (or there was nothing to
    decide), else pass."""
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if not verdicts or Verdict.UNDECIDED in verdicts:
        return Verdict.UNDECIDED
    return Verdict.PASS


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    """{'pass': n, 'fail': n, 'undecided': n}, every key present (JSON documents carry it)."""
    return {v.value: sum(x is v for x in verdicts) for v in Verdict}


def counts_text(verdicts: list[Verdict]) -> str:
    """'2 passed, 1 failed, 1 undecided' (the counts that are not zero; 'nothing' when empty)."""
    words = {Verdict.PASS: "passed", Verdict.FAIL: "failed", Verdict.UNDECIDED: "undecided"}
    parts = [f"{n} {words[v]}" for v in Verdict if (n := sum(x is v for x in verdicts))]
    return ", ".join(parts) or "nothing"


def policy_note(verdicts: list[Verdict], policy: str) -> str:
    """How undecided verdicts were counted, for the last line of a decision ('' when none or the default)."""
    n = sum(v is Verdict.UNDECIDED for v in verdicts)
    if not n or policy == "error":
        return ""
    return f"{n} undecided counted as {'passed' if policy == 'pass' else 'failed'} (--undecided {policy})"
