"""Option values coerced without pydantic (runner/cli/coercion.py) come out exactly as Typer's own adapter makes
them: every option of every command, on values a person types (and the awkward ones), with the same result or
the same refusal."""

from __future__ import annotations

import enum
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer import _click as click
from typer import _coercion
from typer._click.exceptions import BadParameter
from typer.main import get_command

from runner.cli import app, coercion
from tests.cli.test_imports import command, heavy_after


def parameters() -> list[tuple[str, Any]]:
    """(command path, parameter) for every parameter of every command of the app."""
    found: list[tuple[str, Any]] = []

    def walk(cmd: click.Command, path: str) -> None:
        found.extend((f"{path} {p.name}", p) for p in cmd.params if hasattr(p, "type_descriptor"))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "matrix")
    return found


def outcome(runtime: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        return "value", runtime.coerce(value, param=param, ctx=ctx)
    except BadParameter as e:
        return "refused", e.format_message()


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    root = tmp_path_factory.mktemp("values")
    (root / "file").write_text("x")
    (root / "dir").mkdir()
    secret = root / "secret"  # unreadable to anyone but root
    secret.write_text("x")
    secret.chmod(0)
    words = ["", "-", "x", " spaced value ", "ünïcode", "1", "0", "true", "no", "3.5", str(root / "file"),
             str(root / "dir"), str(root / "missing"), str(secret), "~/x", "a\nb"]
    class Word(str, enum.Enum):
        A = "a"

    return words + ["nul\0byte", Word.A, b"bytes", b"x" + bytes([0xff]), None, True, False, Path("p"), 7, ["a", "b"], ("c",)]


def test_every_option_coerces_as_typer_does(values: list[Any]) -> None:
    assert coercion.install(), "Typer's names are as this module expects (else nothing would be changed)"
    ctx = click.Context(get_command(app))
    plain = 0
    for where, p in parameters():
        ours = p.get_runtime_param()
        theirs = _coercion.build_runtime_param(p.type_descriptor)
        if type(ours).__name__ == "PlainRuntimeParam":
            plain += 1
        for v in values:
            got = outcome(ours, v, p, ctx)
            want = outcome(theirs, v, p, ctx)
            assert got == want, f"{where} ({p.type_descriptor.annotation}) of {v!r}: {got} against Typer's {want}"
    assert plain >= 40, f"the plain coercion took only {plain} parameters"


def test_a_bad_path_is_refused_in_typers_words(tmp_path: Path) -> None:
    """The checks stay Typer's: a path that must exist and does not is refused with its message."""
    info = typer.models.OptionInfo(exists=True)
    descriptor = _coercion.resolve_type_descriptor(Path, info)
    param = typer.core.TyperOption(param_decls=["--p"], type_descriptor=descriptor)
    ctx = click.Context(get_command(app))
    got = outcome(param.get_runtime_param(), str(tmp_path / "missing"), param, ctx)
    assert got[0] == "refused" and "does not exist" in got[1]
    assert type(param.get_runtime_param()).__name__ == "PlainRuntimeParam"


@pytest.mark.parametrize("argv", [["--help"], ["ls"], ["show"], ["show", "nosuchrun"]])
def test_the_everyday_commands_load_no_pydantic(argv: list[str], tmp_path: Path) -> None:
    """`ls` and `show` read the store and print: no pydantic (about 0.12 s of the 2-vCPU VM's 0.4)."""
    db = [] if "--help" in argv else ["--db", str(tmp_path / "m.db")]
    code = command(*argv, *db).replace("main()\n", "try:\n    main()\nexcept SystemExit:\n    pass\n"
                                       "print('pydantic:', 'pydantic' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pydantic: False" in done.stderr, done.stderr[-2000:]


def test_the_probe_sees_pydantic_where_a_command_needs_it(tmp_path: Path) -> None:
    """`plan` reads a matrix file through pydantic: the same probe reports it."""
    assert heavy_after("import runner.cli, sys\nimport pydantic\n") == []  # the helper runs at all
    code = command("plan", "--db", str(tmp_path / "m.db")).replace(
        "main()\n", "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('pydantic:', 'pydantic' in sys.modules, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert "pydantic: True" in done.stderr, done.stderr[-2000:]
