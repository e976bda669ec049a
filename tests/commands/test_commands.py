"""One command contract (runner/commands/base.py): every command is one module with one registered class, the command
line only declares options and hands them over, and a new command is two things: its module (a Command registered
in COMMANDS) and its options on the app; the test below adds one at run time that way (docs/internals.md, "How to
add a command")."""

from __future__ import annotations

import ast
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from runner import cli
from runner.base.errors import BackendError, ConfigError
from runner.commands.base import COMMANDS, SHARED, Command, register

ROOT = Path(__file__).resolve().parents[2]
COMMANDS_DIR = ROOT / "runner" / "commands"


class Toy(Command):
    """A command that greets, or refuses a name it is told to refuse."""

    name = "toy"
    help = "Greet someone; nothing else."
    details = "The toy command of tests/commands/test_commands.py."

    def run(self, who: str, refuse: str | None, status: int) -> int:
        if who == refuse:
            raise ConfigError(f"--who {who}: refused; pass another name")
        self.say(f"hello, {who}")
        return status


@pytest.fixture
def toy() -> Iterator[None]:
    """Toy as a user would add it: its class registered, its options declared on the app; both taken back after."""
    register(Toy)
    before = list(cli.app.registered_commands)

    @cli.command("toy")
    def toy_options(who: Annotated[str, typer.Option("--who", help="whom to greet")] = "world",
                    refuse: Annotated[str | None, typer.Option("--refuse", help="a name to refuse")] = None,
                    status: Annotated[int, typer.Option("--status", help="exit with this")] = 0) -> None:
        cli._done(cli.call("toy", who=who, refuse=refuse, status=status))

    try:
        yield
    finally:
        cli.app.registered_commands[:] = before
        COMMANDS.forget("toy")


def test_a_command_added_at_run_time_prints_exits_and_goes_through_the_boundary(toy: None) -> None:
    runner = CliRunner()
    said = runner.invoke(cli.app, ["toy", "--who", "you"])
    assert (said.exit_code, said.output) == (0, "hello, you\n")
    told = runner.invoke(cli.app, ["toy", "--status", "5"])
    assert (told.exit_code, told.output) == (5, "hello, world\n")
    refused = runner.invoke(cli.app, ["toy", "--who", "[red]x", "--refuse", "[red]x"])
    assert refused.exit_code == 2 and (refused.exception is None or isinstance(refused.exception, SystemExit))
    assert refused.output == "error: --who [red]x: refused; pass another name\n"
    helped = runner.invoke(cli.app, ["--help"], terminal_width=100)
    assert "Greet someone; nothing else." in helped.output
    page = runner.invoke(cli.app, ["toy", "--help"], terminal_width=100)
    assert page.exit_code == 0 and "The toy command of" in page.output and "--who" in page.output
    assert "Exit status (runner/base/exitcodes.py)" in page.output and "130: interrupted" in page.output


def test_the_toy_is_gone_after_its_test() -> None:
    assert "toy" not in COMMANDS and "toy" not in {c.name for c in cli.app.registered_commands}
    result = CliRunner().invoke(cli.app, ["toy"])
    assert result.exit_code == 2 and "No such command 'toy'" in result.output


def test_a_name_registered_twice_is_refused(toy: None) -> None:
    class Other(Toy):
        pass

    with pytest.raises(BackendError, match="command 'toy' is registered twice"):
        register(Other)


def test_every_command_module_registers_the_command_it_is_named_after() -> None:
    found = [m.name for m in pkgutil.iter_modules([str(COMMANDS_DIR)]) if m.name not in SHARED]
    assert len(found) == 15
    for module in found:
        cls = COMMANDS.get(module.rstrip("_"))
        assert cls.__module__ == f"runner.commands.{module}" and issubclass(cls, Command)
        assert cls.help and "\n\n" not in cls.help, cls.name  # one paragraph; the rest is `details`


def test_the_command_line_declares_every_registered_command_and_no_other() -> None:
    declared = [c.name for c in cli.app.registered_commands]
    assert sorted(declared) == COMMANDS.names()


def test_no_command_module_has_a_main() -> None:
    """Each command's class says what it is; no module-level `main` (or `*_main`) stands for it."""
    mains = [f"{p.name}: {n.name}" for p in COMMANDS_DIR.glob("*.py") for n in ast.parse(p.read_text()).body
             if isinstance(n, ast.FunctionDef) and (n.name == "main" or n.name.endswith("_main"))]
    assert mains == []


def _declarations() -> list[ast.FunctionDef]:
    tree = ast.parse((ROOT / "runner" / "cli" / "__init__.py").read_text())
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "command" for d in n.decorator_list)]


def test_the_command_line_only_hands_option_values_over() -> None:
    """Each declaration's body is `_done(call(NAME, option=option, ...))`: every parameter passed on under its own
    name (and the global --verbose where the command takes it), nothing computed, nothing printed."""
    decls = _declarations()
    assert len(decls) == 15
    for fn in decls:
        (name,) = [d.args[0].value for d in fn.decorator_list if isinstance(d, ast.Call)]  # type: ignore[attr-defined]
        assert len(fn.body) == 1, fn.name
        done = fn.body[0].value  # type: ignore[attr-defined]
        assert isinstance(done, ast.Call) and ast.unparse(done.func) == "_done", fn.name
        (inner,) = done.args
        assert isinstance(inner, ast.Call) and ast.unparse(inner.func) == "call" and inner.args[0].value == name
        params = [a.arg for a in fn.args.args]
        passed = {k.arg: ast.unparse(k.value) for k in inner.keywords}
        assert {k: v for k, v in passed.items() if k != "verbose"} == {p: p for p in params}, fn.name
        assert passed.get("verbose", "state['verbose']") == "state['verbose']", fn.name
