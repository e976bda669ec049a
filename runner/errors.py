"""One error root; the CLI turns any of these into one line and exit status 1."""

from __future__ import annotations


class MatrixError(Exception):
    """Something the user can fix; the message says what went wrong and what to do."""


class ConfigError(MatrixError):
    """matrix.yaml (or a command-line value) is wrong."""


class BackendError(MatrixError):
    """A backend cannot be used at all (engine unreachable, sbatch missing)."""


class StoreError(MatrixError):
    """The result store cannot be opened or has an unknown schema."""
