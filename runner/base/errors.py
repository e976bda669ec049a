"""One error root; the CLI turns any of these into one line on stderr and the exit status its class names
(runner/base/exitcodes.py)."""

from __future__ import annotations

from typing import ClassVar

from runner.base.exitcodes import Exit


class MatrixError(Exception):
    """Something the user can fix; the message says what went wrong and what to do."""

    exit_code: ClassVar[Exit] = Exit.USAGE


class ConfigError(MatrixError):
    """matrix.yaml (or a command-line value) is wrong."""

    exit_code = Exit.USAGE


class BackendError(MatrixError):
    """A backend cannot be used at all (engine unreachable, sbatch missing)."""

    exit_code = Exit.USAGE


class StoreError(MatrixError):
    """The result store cannot be opened, read or written (corrupt, unknown schema, not writable, disk full)."""

    exit_code = Exit.STORE


class BusyError(MatrixError):
    """Another `matrix run` is measuring the same repeats in this store; the message names it."""

    exit_code = Exit.BUSY


# The exception classes of the store's database driver, registered by the store when it is imported
# (runner/store/db.py): the command line's boundary says such an error in one line (exit 6) without importing the
# driver, which only the store speaks.
DATABASE_ERRORS: list[type[Exception]] = []
