"""The command line's boundary: every error as one line and its exit status (runner/base/exitcodes.py), usage errors
included; option values shown by what they are (FILE, KEY=VALUE), never by their Python type; and the checks of option
values that name paths or runs (runner/cli/__init__.py declares the options)."""

from __future__ import annotations

import errno
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.text import Text
from typer._click.exceptions import ClickException, NoArgsIsHelpError  # Typer 0.29 carries its own Click
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.exceptions import Abort, TyperException

from runner.base import console as consoles
from runner.base.errors import DATABASE_ERRORS, ConfigError, MatrixError
from runner.base.exitcodes import Exit
from runner.cli.complete import use_bash
from runner.commands import DEFAULT_DB


def readable(params: list[Any]) -> list[Any]:
    """Help that names what a value is: an option shows its metavar (FILE, KEY=VALUE; a flag none), an argument its
    name only (RUN), never a Python type (`<list[str]>`, `--help <bool>`)."""
    for p in params:
        if isinstance(p, TyperArgument):
            p.metavar = p.metavar or (p.name or "value").upper()
            p.display_type_rich = _no_type  # type: ignore[method-assign]  # its name column says it already
        elif isinstance(p, TyperOption):
            if p.is_flag:
                p.metavar = ""
            elif p.metavar is None:
                p.metavar = {int: "N", float: "X", Path: "PATH"}.get(p.type_descriptor.annotation, "TEXT")
    return params


def _no_type(ctx: Any) -> None:
    return None


class ReadableCommand(TyperCommand):
    """Every command's class: its options and arguments shown as `readable` says."""

    def get_params(self, ctx: Any) -> list[Any]:
        return readable(super().get_params(ctx))


class Boundary(TyperGroup):
    """The one error boundary: a MatrixError exits with its class's status, a filesystem or database error with 6,
    anything else with 70, a usage error (an unknown option, a missing argument, a value of the wrong type) with 2,
    each as one line on stderr (`--verbose`: the traceback first). Messages are printed as text, never as console
    markup."""

    def get_params(self, ctx: Any) -> list[Any]:
        return readable(super().get_params(ctx))

    def _main_shell_completion(self, ctx_args: Any, prog_name: str, complete_var: str | None = None) -> None:
        """Completing for bash, words are glued back where bash broke them (runner/cli/complete.py)."""
        use_bash()  # after Typer registered its own
        super()._main_shell_completion(ctx_args, prog_name, complete_var)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, windows_expand_args: bool = True, **extra: Any) -> Any:
        use_bash()
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False,
                                windows_expand_args=windows_expand_args, **extra) or 0
        except NoArgsIsHelpError as e:  # `matrix` alone: the help was printed
            code = e.exit_code
        except ClickException as e:
            ctx = getattr(e, "ctx", None)
            where = f"; `{ctx.command_path} --help` lists what it takes" if ctx is not None else ""
            consoles.stderr().print(Text.assemble(("error: ", "bold red"), f"{e.format_message().rstrip('.')}{where}"),
                                    soft_wrap=True)
            code = e.exit_code
        except Abort:
            code = 1
        if standalone_mode:
            sys.exit(code)
        return code

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, Abort, TyperException):
            raise
        except KeyboardInterrupt:
            _fail("interrupted", Exit.INTERRUPTED, label="")
        except MatrixError as e:
            _fail(str(e), e.exit_code)
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise
            _fail(os_error_line(e), Exit.STORE)
        except tuple(DATABASE_ERRORS) as e:
            _fail(f"{state['db'] or 'the result store'}: cannot be read or written ({e}); the file may be damaged: "
                  "restore it from a copy, or pass another --db", Exit.STORE)
        except Exception as e:  # noqa: BLE001 (the boundary: a bug is one line and exit 70, not a traceback)
            _fail(f"internal error: {type(e).__name__}: {e}. This is a bug in matrix; `matrix -v ...` shows the "
                  "traceback", Exit.INTERNAL)


def _fail(message: str, code: Exit, label: str = "error: ") -> NoReturn:
    if state["verbose"]:
        traceback.print_exc()
    consoles.stderr().print(Text.assemble((label, "bold red"), message), soft_wrap=True)
    raise typer.Exit(int(code))


WHAT_TO_DO = {
    errno.ENOSPC: "the disk is full: free space there and run the command again",
    errno.EDQUOT: "the disk quota is used up: free space there and run the command again",
    errno.EACCES: "permission denied: make it writable for this user, or pass another path",
    errno.EPERM: "not permitted: make it writable for this user, or pass another path",
    errno.EROFS: "a read-only filesystem: pass a path on a writable one",
    errno.ENOTDIR: "a part of this path is a file, not a folder: pass another path",
    errno.EISDIR: "is a folder where a file is needed: pass a file path",
    errno.EEXIST: "exists and is not a folder: pass another path",
    errno.ENOENT: "no such file or folder",
    errno.ENAMETOOLONG: "the name is too long: pass a shorter path",
}


def os_error_line(e: OSError) -> str:
    """An OSError as one line: the file, what went wrong and what to do."""
    names = " -> ".join(str(n) for n in (e.filename, e.filename2) if n is not None)
    what = WHAT_TO_DO.get(e.errno or 0, e.strerror or str(e))
    return f"{names}: {what}" if names else f"{e.strerror or e}: {what}"


state: dict[str, Any] = {"verbose": False, "db": None}


def store_path(db: Path) -> Path:
    """--db: remembered for the error boundary; a path the store cannot use (a folder, a file in the way) is the
    store's StoreError (exit 6), said in one line when it is opened."""
    state["db"] = db
    return db


def store_paths(dbs: list[Path] | None) -> list[Path] | None:
    """--db repeated (publish): none given is $MATRIX_DB (a single store, as --db takes it) when set; the last store
    named (the default one when none is) remembered as store_path does."""
    if not dbs and os.environ.get("MATRIX_DB"):
        dbs = [Path(os.environ["MATRIX_DB"])]
    store_path(dbs[-1] if dbs else DEFAULT_DB)
    return dbs


def _folder_path(path: Path | None, option: str) -> Path | None:
    """--out and --workdir name a folder (made if missing): one line (exit 2) when a file is in the way."""
    if path is None:
        return None
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                what = "is a file" if p == path else f"is under {p}, which is a file"
                raise ConfigError(f"{option} {path}: {what}; pass a folder")
            break
    return path


def run_refs(refs: list[str] | None) -> list[str] | None:
    """--run / RUN: a blank one (an unset shell variable) must not mean every run."""
    for ref in refs or []:
        if not ref.strip():
            raise ConfigError(f"run {ref!r}: give a run id or a prefix of one (`matrix ls` lists them); a blank one "
                              "would mean every run")
    return refs


def run_ref(ref: str | None) -> str | None:
    run_refs([ref] if ref is not None else None)
    return ref


def workdir_path(path: Path) -> Path:
    return _folder_path(path, "--workdir") or path


def out_path(path: Path | None) -> Path | None:
    return _folder_path(path, "--out")
