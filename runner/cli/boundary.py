"""The command line's boundary: every error as one line and its exit status (runner/base/exitcodes.py), and the
checks of option values that name paths or runs (runner/cli/__init__.py declares the options)."""

from __future__ import annotations

import errno
import traceback
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.text import Text
from typer.core import TyperGroup
from typer.exceptions import Abort, TyperException

from runner.base import console as consoles
from runner.base.errors import DATABASE_ERRORS, ConfigError, MatrixError
from runner.base.exitcodes import Exit
from runner.commands import DEFAULT_DB


class Boundary(TyperGroup):
    """The one error boundary: a MatrixError exits with its class's status, a filesystem or database error with 6,
    anything else with 70, each as one line on stderr (`--verbose`: the traceback first). Usage errors stay
    Typer's (2). Messages are printed as text, never as console markup."""

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
    """--db repeated (publish): the last store named (the default one when none is) remembered as store_path does."""
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
