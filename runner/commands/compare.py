"""`matrix compare A B`: pair the cells of two sides and say which is faster, by how much and whether it is
significant; with --fail-on, the regression gate (runner/commands/decide.py) after the comparison."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from runner.base.errors import ConfigError
from runner.commands.base import Command, register


@register
class CompareCommand(Command):
    name = "compare"
    help = "Pair the cells of A and B and say which is faster, by how much, and whether it is significant."
    details = (
        "A side is an environment name, a tag, a backend kind or a run id, or one spelled with its kind:\n"
        "env:NAME, tag:NAME, backend:KIND, run:ID, host:NAME (the host a repeat ran on) or machine:X (its\n"
        "hardware in words, or the id of the store it was imported from).\n\n"
        "With --fail-on, a regression gate: exit status 1 when a pair changed more than the threshold AND\n"
        "significantly; 0 only when every pair's 95% interval of the change lies inside the threshold; 5\n"
        "otherwise: undecided (the interval reaches across the threshold, fewer than 2 ok repeats a side, a\n"
        "metric not measured, run settings that differ; --undecided fail|pass counts those otherwise), with\n"
        "the repeats a side that would decide; the output lists the pairs that failed or were undecided (in\n"
        "JSON: the `gate` member).")

    def run(self, a: str, b: str, db: Path, fmt: str | None, metric: str, min_effect: float | None,
            fail_on: Sequence[str] | None, undecided: str | None, pool: bool) -> int:
        from runner.commands import decide
        from runner.report import compare_command
        if min_effect is not None and not (math.isfinite(min_effect) and 0 <= min_effect < 1):
            raise ConfigError(f"--min-effect {min_effect}: a fraction from 0 to below 1 (0.02 = 2%)")
        min_effect = decide.one_threshold(metric, min_effect, fail_on or [])
        gate_out, status = "", 0
        if fail_on:
            gate_out, status = decide.gate_command(db, a, b, fail_on, fmt, undecided, pool)
        elif undecided is not None:
            raise ConfigError("--undecided applies to the gate: add --fail-on (e.g. --fail-on slower:3%)")
        text = compare_command(db, a, b, fmt, metric, min_effect=min_effect, pool=pool)
        if gate_out:
            if fmt == "csv":
                self.say(gate_out, err=True, nl=False)
            text = decide.with_gate(text, gate_out, fmt)
        if text:
            self.say(text)
        return int(status)
