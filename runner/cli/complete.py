"""What the shell completes for an option's value (`matrix --install-completion`): each list is the one
runner/commands/choices.py reads from the table that defines it; and bash's completion, given whole words."""

from __future__ import annotations

from collections.abc import Iterable

from typer import _completion_shared
from typer._click.shell_completion import CompletionItem, add_completion_class
from typer._completion_classes import BashComplete

from runner.commands import choices

BREAKS = "=:"  # in bash's COMP_WORDBREAKS: it splits `precision=bf16` and `backend:docker` into three words

# Typer's bash script, and one line: a lone answer that ends in a break (`precision=`, `slower:`) takes no space
# after it, so that its value can be typed (or completed) right after.
NOSPACE = "    [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *[=:] ]] && compopt -o nospace\n"
BASH_SCRIPT = _completion_shared.COMPLETION_SCRIPT_BASH.replace("    return 0\n", NOSPACE + "    return 0\n")


def use_bash() -> None:
    """Bash's completion as this module makes it: the script `--install-completion` writes, and the words glued back
    when it asks (Typer's own otherwise; its shells are registered as it parses a command line)."""
    _completion_shared._completion_scripts["bash"] = BASH_SCRIPT
    add_completion_class(Bash, "bash")


class Bash(BashComplete):
    """Bash's completion, given whole words: bash hands `--only precision=bf` over as `precision`, `=`, `bf` (it breaks
    words at `=` and `:`); they are glued back before the value is completed, and each answer is what follows the last
    break, the part bash replaces."""

    prefix = ""

    def get_completion_args(self) -> tuple[list[str], str]:
        args, incomplete = super().get_completion_args()
        words = glued([*args, incomplete]) if incomplete else [*glued(args), ""]
        self.prefix = words[-1][:max(words[-1].rfind(c) for c in BREAKS) + 1]
        return words[:-1], words[-1]

    def format_completion(self, item: CompletionItem) -> str:
        value = str(item.value)
        return value[len(self.prefix):] if value.startswith(self.prefix) else value


def glued(words: list[str]) -> list[str]:
    """Words as typed: a break bash split off (`=`, `:`) joins the word before it and the one after."""
    out: list[str] = []
    join = False
    for w in words:
        if out and (join or (w and w in BREAKS)):
            out[-1] += w
        else:
            out.append(w)
        join = bool(w) and w in BREAKS
    return out


def _starting(incomplete: str, values: Iterable[str]) -> list[str]:
    return [v for v in dict.fromkeys(values) if v.startswith(incomplete)]


def metrics(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.metrics())


def bisect_metrics(incomplete: str) -> list[str]:
    """bisect's --metric: the metrics, or `status` (only how the repeats ended)."""
    return _starting(incomplete, [*choices.metrics(), "status"])


def fail_on(incomplete: str) -> list[str]:
    return _starting(incomplete, [f"{word}:" for word in choices.gate_rules()])


def report_formats(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.report_formats())


def compare_formats(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.compare_formats())


def diff_formats(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.diff_formats())


def check_formats(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.check_formats())


def undecided(incomplete: str) -> list[str]:
    return _starting(incomplete, choices.undecided_policies())


def backends(incomplete: str) -> list[str]:
    """--env takes an environment's name, tag or backend: the backends are known without a matrix file."""
    return _starting(incomplete, choices.backends())


def sides(incomplete: str) -> list[str]:
    """compare's A and B: a backend kind, or a side spelled with its kind (env:, tag:, backend:KIND, run:, ...)."""
    kinds = choices.backends()
    return _starting(incomplete, [*kinds, *(f"backend:{k}" for k in kinds), "env:", "tag:", "run:", "host:",
                                  "machine:"])


def only(incomplete: str) -> list[str]:
    """--only KEY=VALUE: the axes, then the values of an axis the bench defines (precision, model, device, ...)."""
    if "=" not in incomplete:
        return _starting(incomplete, [f"{axis}=" for axis in choices.axes()])
    axis = incomplete.partition("=")[0]
    return _starting(incomplete, [f"{axis}={v}" for v in choices.axis_values(axis)])
