"""How a rule names cells (matrix.yaml's include/exclude, `--only`, references' `match:`): the keys it may use,
and values compared with their axis's type. Below runner/matrix.py and the references that both use it."""

from __future__ import annotations

import contextvars
from typing import Any

from runner.spec import AXIS_NAMES, Axes, Cell

MATCH_KEYS = ("environment", *AXIS_NAMES)
# The axes model in force while a file is read (a workload's own axes are free-form).
AXES: contextvars.ContextVar[type[Axes]] = contextvars.ContextVar("axes", default=Axes)


def same(a: Any, b: Any) -> bool:
    """Typed values are equal: 1 is not True (a bool axis and an int axis never meet, but be exact)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def coerce(axis: str, value: Any) -> Any:
    """Rule and --only values arrive as raw YAML or command-line scalars: give them the axis's type."""
    validated = AXES.get().model_validate({axis: [value]})
    return getattr(validated, axis)[0]


def value_of(cell: Cell, key: str) -> Any:
    return cell.env_name if key == "environment" else cell.params.get(key)


def show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
