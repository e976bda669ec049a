"""One table of exit statuses: the README, every command's --help and the error classes agree with
runner/base/exitcodes.py, and the CLI's error boundary exits with them."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from runner import cli
from runner.base import exitcodes
from runner.base.errors import BackendError, BusyError, ConfigError, MatrixError, StoreError
from runner.base.exitcodes import MEANINGS, Exit

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = sorted(c.name or c.callback.__name__ for c in cli.app.registered_commands if c.callback)


def flat(text: str) -> str:
    """Text without layout: rich's help wraps and indents lines, and draws boxes around options."""
    return " ".join(re.sub(r"[│╭╮╰╯─]", " ", text).split())


def test_the_readme_table_is_the_module_table() -> None:
    readme = (ROOT / "README.md").read_text()
    assert exitcodes.markdown_table() in readme
    # Nothing else in the README claims a status the table does not have.
    table = {str(int(m.code)) for m in MEANINGS}
    claimed = set(re.findall(r"\bexits? (\d+)\b", readme))
    assert claimed <= table, claimed - table


def test_every_status_has_a_meaning_and_every_named_command_exists() -> None:
    assert [m.code for m in MEANINGS] == list(Exit)
    for m in MEANINGS:
        for name in exitcodes.commands_of(m):
            word = name.split()[0]
            assert word == "all" or word in COMMANDS, f"{m.code!r} names a command that does not exist: {name}"


@pytest.mark.parametrize("command", COMMANDS)
def test_each_commands_help_lists_its_statuses_from_the_table(command: str) -> None:
    result = CliRunner().invoke(cli.app, [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    shown = flat(result.output)
    expected = exitcodes.for_command(command)
    assert expected and {Exit.OK, Exit.USAGE, Exit.INTERNAL} <= {m.code for m, _ in expected}
    for m, _ in expected:
        assert flat(f"{int(m.code)}: ") in shown and flat(m.text) in shown, (command, m.code)
    for m in MEANINGS:
        if m not in [e for e, _ in expected]:
            assert flat(m.text) not in shown, (command, m.code)
    assert "Exit status: 0 when" not in shown  # the hand-written paragraphs are gone


def test_error_classes_carry_their_status() -> None:
    assert (MatrixError.exit_code, ConfigError.exit_code, BackendError.exit_code) == (Exit.USAGE,) * 3
    assert (StoreError.exit_code, BusyError.exit_code) == (Exit.STORE, Exit.BUSY)


def boom(exc: BaseException) -> typer.Typer:
    """An app with the CLI's boundary whose one command raises `exc`."""
    app = typer.Typer(cls=cli.Boundary)

    @app.command()
    def go() -> None:
        raise exc

    @app.command()
    def other() -> None:  # two commands, so `go` is a subcommand as in the real CLI
        pass

    return app


@pytest.mark.parametrize(("exc", "code", "says"), [
    (ConfigError("m.yaml: axes.x (line 3): bad"), 2, "error: m.yaml: axes.x (line 3): bad"),
    (StoreError("r.db is not a matrix result store"), 6, "error: r.db is not a matrix result store"),
    (BusyError("run 1 holds r.db"), 7, "error: run 1 holds r.db"),
    (OSError(errno.ENOSPC, "No space left on device", "results/r.db"), 6, "error: results/r.db: the disk is full"),
    (PermissionError(errno.EACCES, "Permission denied", "/x/out"), 6, "error: /x/out: permission denied"),
    (ZeroDivisionError("division by zero"), 70, "error: internal error: ZeroDivisionError: division by zero"),
    (KeyboardInterrupt(), 130, "interrupted"),
])
def test_the_boundary_turns_each_error_into_one_line_and_its_status(exc: BaseException, code: int,
                                                                    says: str) -> None:
    result = CliRunner().invoke(boom(exc), ["go"])
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.output.strip().startswith(says) and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_verbose_shows_the_traceback_then_the_line() -> None:
    cli.state["verbose"] = True
    try:
        result = CliRunner().invoke(boom(ZeroDivisionError("x")), ["go"])
    finally:
        cli.state["verbose"] = False
    assert result.exit_code == 70 and "Traceback" in result.output
    assert result.output.strip().splitlines()[-1].startswith("error: internal error: ZeroDivisionError")


def test_messages_are_not_console_markup() -> None:
    result = CliRunner().invoke(boom(ConfigError("--only model=[/x]: no [red]cell[/red] here")), ["go"])
    assert result.exit_code == 2
    assert "--only model=[/x]: no [red]cell[/red] here" in result.output


def test_a_gate_trip_and_a_misspelt_side_exit_differently(tmp_path: Path) -> None:
    from tests.report.conftest import fill_store, load_results

    db = str(fill_store(tmp_path / "r.db", load_results()))
    runner = CliRunner()
    # cluster-pt041 has OOM repeats where ngc-18.07 has ok ones: a regression the gate trips on.
    tripped = runner.invoke(cli.app, ["compare", "ngc-18.07", "cluster-pt041", "--db", db, "--fail-on", "slower:5%"])
    typo = runner.invoke(cli.app, ["compare", "ngc-18.07", "cluster-pt04l", "--db", db, "--fail-on", "slower:5%"])
    assert tripped.exit_code in (Exit.FAILED, Exit.UNDECIDED), tripped.output
    assert typo.exit_code == Exit.USAGE and "'cluster-pt04l' matches no result" in typo.output
