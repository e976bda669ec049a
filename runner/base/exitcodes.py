"""The one table of `matrix` exit statuses: every command exits with one of these, the README's table and
`--help` texts are checked against it (tests/base/test_exitcodes.py).

Distinct on purpose: a pipeline must tell a regression (1) from a typo (2), a failed repeat (3) from a
broken store (6), and an answer it cannot trust (5) from a pass (0).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Exit(IntEnum):
    OK = 0                # done; every selected repeat ok or unsupported; every decision passed
    FAILED = 1            # a decision failed: the gate tripped, a reference failed (check)
    USAGE = 2             # bad command line, matrix file or option value, a run id that names no run (one line)
    NOT_MEASURED = 3      # run/collect: a repeat ended failed, oom, diverged, timeout, cancelled or not_started, or
                          # its environment could not start
    REFERENCE_FAILED = 4  # run/collect: everything was measured, but a `references:` entry or the `gate:` failed
    UNDECIDED = 5         # a decision could not be made from the data (too few repeats, no spread to test)
    STORE = 6             # the result store or its filesystem: corrupt, unknown schema, not writable, disk full;
                          # a damaged or foreign results file to import
    BUSY = 7              # another `matrix run` holds the work this one would do (the message names it)
    SPREAD = 8            # bisect: the change is spread over several steps; no single pair is named
    INTERNAL = 70         # a bug in matrix: one line and `matrix -v` for the traceback (EX_SOFTWARE)
    INTERRUPTED = 130     # Ctrl-C or SIGTERM; what was measured is stored


@dataclass(frozen=True)
class Meaning:
    code: Exit
    commands: str
    text: str


# What each status means to a user, in the order the README's table lists them.
MEANINGS: tuple[Meaning, ...] = (
    Meaning(Exit.OK, "all", "done: every selected repeat is `ok` or `unsupported` (or still queued after "
            "`--no-wait`); every decision passed; bisect named the one pair that makes the change"),
    Meaning(Exit.FAILED, "check, compare --fail-on, bisect", "a decision failed: a reference failed, the gate "
            "tripped, or bisect found no change between the two ends (nothing to look for)"),
    Meaning(Exit.USAGE, "all", "bad command line, matrix file or option value, or a run id that names no run (a "
            "typo); nothing ran (one line on stderr names the file, the field and what is allowed)"),
    Meaning(Exit.NOT_MEASURED, "run, collect", "a selected repeat ended `failed`, `oom`, `diverged`, `timeout`, "
            "`cancelled` or `not_started`, or its environment could not start (nothing stored for it); the summary "
            "counts them and says why, `matrix show` has the stored ones' reasons"),
    Meaning(Exit.REFERENCE_FAILED, "run, collect",
            "everything was measured, but a `references:` entry or a `gate:` entry of the matrix file failed"),
    Meaning(Exit.UNDECIDED, "check, compare --fail-on, run, bisect",
            "a decision was undecided (too few repeats, no spread to test against, or a bisect whose pairs could "
            "not be told apart at the most repeats); never reported as passed unless `--undecided pass` asks for "
            "it, and never a culprit"),
    Meaning(Exit.STORE, "all", "the result store or its filesystem: a corrupt or unknown store (or results file to import), a folder that "
            "cannot be written, a full disk, a link, FIFO or another user's file where matrix would write (or a file "
            "to import that is not a regular one) (one line says which file and what to do)"),
    Meaning(Exit.BUSY, "run, collect", "another `matrix run` is measuring the same repeats in this store; the "
            "message names it (its host, process and run id)"),
    Meaning(Exit.SPREAD, "bisect", "the change is spread over several steps (or a drift of steps each below the "
            "threshold): no single pair is named; the steps found are listed"),
    Meaning(Exit.INTERNAL, "all", "a bug in matrix: one line; `matrix -v ...` shows the traceback"),
    Meaning(Exit.INTERRUPTED, "all", "interrupted (Ctrl-C or SIGTERM); what was measured is stored"),
)


def commands_of(meaning: Meaning) -> list[str]:
    """The commands a status applies to, as written: 'all', 'run', 'compare --fail-on', ..."""
    return [c.strip() for c in meaning.commands.split(",")]


def for_command(command: str) -> list[tuple[Meaning, str]]:
    """The statuses `command` can exit with, each with the option it needs ('' or '--fail-on')."""
    out = []
    for m in MEANINGS:
        for name in commands_of(m):
            word, _, option = name.partition(" ")
            if word in ("all", command):
                out.append((m, option))
                break
    return out


def help_text(command: str) -> str:
    """The `Exit status` paragraph of a command's --help, from MEANINGS."""
    lines = [f"{int(m.code)}: {'with ' + option + ', ' if option else ''}{m.text}" for m, option in for_command(command)]
    return "Exit status (runner/base/exitcodes.py):\n\n" + "\n\n".join(lines)


def markdown_table() -> str:
    """The README's exit-status table, from MEANINGS."""
    rows = [f"| {int(m.code)} | {m.commands} | {m.text} |" for m in MEANINGS]
    return "\n".join(["| status | commands | means |", "| --- | --- | --- |", *rows])
