"""The command contract (asv's `Command`): a command is one module holding one class that says what it is: its name,
one line of help (and the paragraphs after it), and `run(option values) -> exit status`, which prints what the
command says and returns its status (runner/base/exitcodes.py; 0: success). COMMANDS is the registry the command line
looks each name up in (a command's module is imported when its name is first asked for); runner/cli/__init__.py
only declares the options and hands their values to `run`."""

from __future__ import annotations

import keyword
import pkgutil
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import typer

from runner.base import console as consoles
from runner.base import exitcodes
from runner.base.registry import Registry
from runner.base.table import Table


class Command:
    """One `matrix` command. `name`: what a user types; `help`: one line, what `matrix --help` lists; `details`:
    the paragraphs `matrix NAME --help` adds (none: ""). `run` takes the option values as keyword arguments, as
    the command line declares them (a repeatable option not given: None), and returns the exit status; an error a
    user can fix is raised as a MatrixError, which the command line's boundary prints as one line and its status."""

    name: ClassVar[str]
    help: ClassVar[str]
    details: ClassVar[str] = ""

    def run(self, *args: Any, **options: Any) -> int:
        raise NotImplementedError

    @classmethod
    def help_page(cls) -> str:
        """`matrix NAME --help`'s text: the one line, the details, then the statuses the command exits with; each
        paragraph one line, for the terminal to wrap (a line break written in the source is not the terminal's)."""
        text = "\n\n".join(p for p in (cls.help, cls.details) if p)
        return "\n\n".join(" ".join(p.split()) for p in f"{text}\n\n{exitcodes.help_text(cls.name)}".split("\n\n"))

    @classmethod
    def short_help(cls) -> str:
        """What `matrix --help` lists: the help's first sentence."""
        first = " ".join(cls.help.split())
        end = first.find(". ")
        return first if end < 0 else first[:end + 1]

    @staticmethod
    def say(text: str, *, err: bool = False, nl: bool | None = None) -> None:
        """Print text as written (never console markup) on stdout (stderr: `err`), ending it with a newline unless
        it has one (`nl` says otherwise)."""
        typer.echo(text, err=err, nl=not text.endswith("\n") if nl is None else nl)

    @staticmethod
    def print_table(table: Table, title: str = "") -> None:
        """Print a table on the terminal through the project's console (runner/base/console.py)."""
        consoles.print_table(consoles.stdout(), table, title)


# The modules of runner/commands/ that hold what commands share rather than a command.
SHARED = ("base", "choices", "decide")


def modules() -> dict[str, str]:
    """Each command's module by the command's name, found without importing any: the command NAME is
    runner/commands/NAME.py (NAME_.py where NAME is a Python keyword: import_.py)."""
    found = sorted(m.name for m in pkgutil.iter_modules([str(Path(__file__).parent)]) if m.name not in SHARED)
    return {n[:-1] if keyword.iskeyword(n[:-1]) else n: f"runner.commands.{n}" for n in found}


COMMANDS: Registry[type[Command]] = Registry("command", modules())
C = TypeVar("C", bound=type[Command])


def register(cls: C) -> C:
    """Class decorator: make the command available under its name (a name taken twice is refused)."""
    COMMANDS.register(cls.name, cls)
    return cls


def call(name: str, **options: Any) -> int:
    """Run the registered command `name` with these option values; its exit status."""
    return COMMANDS.get(name)().run(**options)
