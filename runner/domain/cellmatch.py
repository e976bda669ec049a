"""Which cells a rule, a `--only` or a reference matches: values given the axis's type, compared exactly.
Below the matrix file's reading (runner/matrix/__init__.py) and everything that matches cells (references, selection)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from runner.base.errors import ConfigError
from runner.domain.cells import AXIS_NAMES, Axes, Cell, Scalar, WorkloadAxes

# The axes model that include/exclude values, --only and reference matches are typed by: bench's, or a
# workload matrix's while it is read or its cells are selected.
AXES: contextvars.ContextVar[type[Axes]] = contextvars.ContextVar("axes", default=Axes)


MATCH_KEYS = ("environment", *AXIS_NAMES)


def same(a: Any, b: Any) -> bool:
    """Typed values are equal: 1 is not True (a bool axis and an int axis never meet, but be exact)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def matches(row: Mapping[str, Any], rule: Mapping[str, Scalar], keys: Iterable[str]) -> bool:
    return all(same(row.get(k), rule[k]) for k in keys if k in rule)


def typed_rule(rule: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """An include/exclude rule with each axis value converted to its axis's type, once: `lr: 1` must match
    the cell whose lr axis became 1.0, `channels_last: "true"` the one whose is True."""
    return {k: (coerce(k, v) if k in AXIS_NAMES else v) for k, v in rule.items()}


def coerce(axis: str, value: Any) -> Any:
    """Rule and --only values arrive as raw YAML or command-line scalars: give them the axis's type."""
    validated = AXES.get().model_validate({axis: [value]})
    return getattr(validated, axis)[0]


def select(cells: Sequence[Cell], envs: Sequence[str] = (), only: Sequence[str] = ()) -> list[Cell]:
    """Filter cells by environment name/tag/backend and by `KEY=VALUE` pairs (`--env`, `--only`).

    Values are converted to the axis's type (`channels_last=true`, `lr=1`); several values of one key
    are alternatives, different keys must all match. A selection that matches nothing is a ConfigError
    naming the values that exist.
    """
    token = AXES.set(WorkloadAxes if any(c.workload is not None for c in cells) else Axes)
    try:
        return _select(cells, envs, only)
    finally:
        AXES.reset(token)


def _select(cells: Sequence[Cell], envs: Sequence[str], only: Sequence[str]) -> list[Cell]:
    own = sorted({k for c in cells if c.workload is not None for k in c.params if k not in AXIS_NAMES})
    wanted = parse_only(only, own)
    if envs:
        picked = [c for c in cells if any(e in (c.env_name, c.environment.backend) or e in c.environment.tags
                                          for e in envs)]
        if not picked and cells:
            known = sorted({c.env_name for c in cells} | {t for c in cells for t in c.environment.tags}
                           | {c.environment.backend for c in cells})
            raise ConfigError(f"--env {', '.join(envs)}: matches no environment; known: {', '.join(known)}")
        cells = picked

    def hit(cell: Cell, key: str, wanted_value: Scalar) -> bool:
        got = value(cell, key)
        return same(got, wanted_value) or (key in own and got is not None and show(got) == wanted_value)  # own axes: as written

    out = [c for c in cells if all(any(hit(c, k, v) for v in values) for k, values in wanted.items())]
    if wanted and not out and cells:
        for key, values in wanted.items():
            present = list(dict.fromkeys(value(c, key) for c in cells))
            if not any(same(p, v) or (key in own and p is not None and show(p) == v) for p in present for v in values):
                shown = ", ".join(show(p) for p in present if p is not None) or "(the axis is not set)"
                raise ConfigError(f"--only {key}={'|'.join(show(v) for v in values)}: no cell has that value; "
                                  f"{key} has: {shown}")
        raise ConfigError(f"--only {' '.join(only)}: no cell matches all of these together")
    return out


def parse_only(only: Sequence[str], own: Sequence[str] = ()) -> dict[str, list[Scalar]]:
    wanted: dict[str, list[Scalar]] = {}
    for item in only:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in (*MATCH_KEYS, *own):
            raise ConfigError(f"--only {item!r}: expected KEY=VALUE with KEY one of {', '.join((*MATCH_KEYS, *own))}")
        typed: Scalar = value
        if key in AXIS_NAMES:
            try:
                typed = coerce(key, value)
            except ValidationError as e:
                why = e.errors()[0]["msg"].removeprefix("Value error, ")
                raise ConfigError(f"--only {item}: {why}") from None
        wanted.setdefault(key, []).append(typed)
    return wanted


def value(cell: Cell, key: str) -> Any:
    return cell.env_name if key == "environment" else cell.params.get(key)


def show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
