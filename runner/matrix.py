"""matrix.yaml: load with safe_load, validate with pydantic, expand into cells."""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runner import backends
from runner.errors import ConfigError
from runner.spec import AXIS_NAMES, Axes, Cell, EnvironmentBase, Mount, RunSettings, Scalar, Strict

DEFAULT_MATRIX = Path(__file__).with_name("examples") / "quickstart.yaml"
MATCH_KEYS = ("environment", *AXIS_NAMES)


class MatrixFile(Strict):
    """The top level of matrix.yaml; environments are validated by their backend's model."""

    name: str | None = None
    description: str | None = None
    environments: list[dict[str, Any]]
    axes: Axes = Axes()
    include: list[dict[str, Scalar]] = []
    exclude: list[dict[str, Scalar]] = []
    run: RunSettings = RunSettings()
    references: Any = None  # validated by runner/decide/references.py


@dataclass(frozen=True)
class Matrix:
    path: Path | None
    name: str
    environments: tuple[EnvironmentBase, ...]
    axes: Axes
    include: tuple[dict[str, Scalar], ...]
    exclude: tuple[dict[str, Scalar], ...]
    run: RunSettings
    references: tuple[Any, ...] = ()  # runner.decide.references.Reference

    def environment(self, name: str) -> EnvironmentBase:
        for env in self.environments:
            if env.name == name:
                return env
        raise ConfigError(f"no environment {name!r}; environments: {', '.join(e.name for e in self.environments)}")

    def cells(self) -> list[Cell]:
        return expand(self)


# Loading and errors -----------------------------------------------------------------------------
def load(path: Path | str | None) -> Matrix:
    """Read and validate a matrix file; every mistake becomes one ConfigError naming file and field."""
    path = Path(path) if path else DEFAULT_MATRIX
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such matrix file (try `-m examples/quickstart.yaml`)") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
    return parse(text, path)


def parse(text: str, path: Path | None = None, name: str | None = None) -> Matrix:
    where = str(path) if path else "<matrix>"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{where}{line}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with `environments` and `axes` at the top level")
    problems: list[str] = []
    try:
        top = MatrixFile.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_format(where, text, e, ())) from e
    envs: list[EnvironmentBase] = []
    for i, raw in enumerate(top.environments):
        kind = raw.get("backend", "local") if isinstance(raw, dict) else None
        try:
            cls = backends.get(str(kind))
        except ConfigError as e:
            problems.append(_line(where, text, ("environments", i, "backend")) + f": {e}")
            continue
        try:
            envs.append(cls.config.model_validate({**raw, "backend": kind}))
        except ValidationError as e:
            problems.append(_format(where, text, e, ("environments", i), cls.config))
    names = [e.name for e in envs]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}: environments: the name {dup!r} is used twice; names must be unique")
    if not top.environments:
        problems.append(f"{where}: environments: at least one environment is needed")
    for field_name in ("include", "exclude"):
        for i, rule in enumerate(getattr(top, field_name)):
            problems += _check_rule(where, text, field_name, i, rule, set(names))
    if problems:
        raise ConfigError("\n".join(problems))
    stem = path.stem if path else "matrix"
    m = Matrix(path, name or top.name or stem, tuple(envs), top.axes, tuple(map(typed_rule, top.include)),
               tuple(map(typed_rule, top.exclude)), top.run)
    if top.references:
        from runner.decide import references  # pandas: only for files that have references

        def locate(loc: Sequence[Any]) -> str:
            return _line(where, text, loc)

        refs = references.parse(top.references, locate)
        references.check_matches(refs, expand(m), locate)
        m = replace(m, references=refs)
    return m


def typed_rule(rule: Mapping[str, Scalar]) -> dict[str, Scalar]:
    """An include/exclude rule with each axis value converted to its axis's type, once: `lr: 1` must match
    the cell whose lr axis became 1.0, `channels_last: "true"` the one whose is True."""
    return {k: (_coerce(k, v) if k in AXIS_NAMES else v) for k, v in rule.items()}


def _check_rule(where: str, text: str, field_name: str, i: int, rule: dict[str, Scalar],
                env_names: set[str]) -> list[str]:
    problems = []
    for key in rule:
        if key not in MATCH_KEYS:
            problems.append(_line(where, text, (field_name, i, key))
                            + f": unknown key {key!r}; allowed: {', '.join(MATCH_KEYS)}")
    if "environment" in rule and rule["environment"] not in env_names:
        problems.append(_line(where, text, (field_name, i, "environment"))
                        + f": no environment {rule['environment']!r}; allowed: {', '.join(sorted(env_names))}")
    axes = {k: v for k, v in rule.items() if k in AXIS_NAMES}
    try:
        Axes.model_validate(axes)
    except ValidationError as e:
        problems.append(_format(where, text, e, (field_name, i), Axes, strip_index=True))
    return problems


def _format(where: str, text: str, err: ValidationError, prefix: tuple[Any, ...],
            model: type[BaseModel] | None = None, strip_index: bool = False) -> str:
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        if strip_index and len(loc) >= 2 and isinstance(loc[1], int):
            loc = loc[:1] + loc[2:]  # an include value is one scalar, not a list
        full = prefix + loc
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            owner = _owner(model, loc[:-1]) if model else _owner(MatrixFile, loc[:-1])
            allowed = ", ".join(owner.model_fields) if owner else ""
            msg = f"unknown key {loc[-1]!r}" + (f"; allowed: {allowed}" if allowed else "")
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "literal_error":
            msg = f"{e['input']!r} is not allowed; allowed: {(e.get('ctx') or {}).get('expected', '')}"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        lines.append(_line(where, text, full) + f": {msg}")
    return "\n".join(lines)


def _owner(model: type[BaseModel] | None, loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model that owns the field at loc, to list its allowed keys."""
    known: dict[str, type[BaseModel]] = {"axes": Axes, "run": RunSettings, "mounts": Mount}
    current = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(str(part)) if current else None
        nested = [t for t in (field.annotation, *typing.get_args(field.annotation)) if isinstance(t, type)
                  and issubclass(t, BaseModel)] if field else []
        current = nested[0] if nested else known.get(str(part))  # a backend's own nested model, e.g. container
    return current


def _line(where: str, text: str, loc: Sequence[Any]) -> str:
    """'file: a.b[2].c (line N)' for a field path, with the line from the YAML node tree."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    line = _find_line(text, loc)
    return f"{where}: {path}" + (f" (line {line})" if line else "")


def _find_line(text: str, loc: Sequence[Any]) -> int | None:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    best = None
    for part in loc:
        if node is None:
            break
        best = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    best, nxt = k.start_mark.line + 1, v
                    break
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            best = node.start_mark.line + 1
        else:
            break
    return best


# Expansion --------------------------------------------------------------------------------------
def _same(a: Any, b: Any) -> bool:
    """Typed values are equal: 1 is not True (a bool axis and an int axis never meet, but be exact)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


def _matches(row: Mapping[str, Any], rule: Mapping[str, Scalar], keys: Iterable[str]) -> bool:
    return all(_same(row.get(k), rule[k]) for k in keys if k in rule)


def expand(m: Matrix) -> list[Cell]:
    """Every environment times the product of the axes, then exclude, then include (GitHub semantics).

    An include entry adds its extra keys to each combination whose original axis values it
    matches; one that matches none becomes a new combination (axes it omits take their first
    value, and it applies to every environment unless it names one).
    """
    axes = {k: v for k, v in m.axes.model_dump().items() if v is not None}
    names = list(axes)
    original = ("environment", *names)
    rows: list[dict[str, Any]] = []
    for env in m.environments:
        for values in itertools.product(*axes.values()):
            rows.append({"environment": env.name, **dict(zip(names, values, strict=True))})
    rows = [r for r in rows if not any(_matches(r, ex, ex.keys()) for ex in m.exclude)]
    for inc in m.include:
        added = False
        for row in rows:
            if _matches(row, inc, original):
                row.update({k: v for k, v in inc.items() if k not in original})
                added = True
        if not added:
            targets = [inc["environment"]] if "environment" in inc else [e.name for e in m.environments]
            for env_name in targets:
                rows.append({**{k: v[0] for k, v in axes.items()}, **inc, "environment": env_name})
    cells: list[Cell] = []
    seen: set[str] = set()
    for row in rows:
        env = m.environment(str(row.pop("environment")))
        params = {k: _coerce(k, row[k]) for k in AXIS_NAMES if k in row}
        cell = Cell(env, params, m.run)
        if cell.key not in seen:
            seen.add(cell.key)
            cells.append(cell)
    return cells


def _coerce(axis: str, value: Any) -> Any:
    """Rule and --only values arrive as raw YAML or command-line scalars: give them the axis's type."""
    validated = Axes.model_validate({axis: [value]})
    return getattr(validated, axis)[0]


def select(cells: Sequence[Cell], envs: Sequence[str] = (), only: Sequence[str] = ()) -> list[Cell]:
    """Filter cells by environment name/tag/backend and by `KEY=VALUE` pairs (`--env`, `--only`).

    Values are converted to the axis's type (`channels_last=true`, `lr=1`); several values of one key
    are alternatives, different keys must all match. A selection that matches nothing is a ConfigError
    naming the values that exist.
    """
    wanted = _parse_only(only)
    if envs:
        picked = [c for c in cells if any(e in (c.env_name, c.environment.backend) or e in c.environment.tags
                                          for e in envs)]
        if not picked and cells:
            known = sorted({c.env_name for c in cells} | {t for c in cells for t in c.environment.tags}
                           | {c.environment.backend for c in cells})
            raise ConfigError(f"--env {', '.join(envs)}: matches no environment; known: {', '.join(known)}")
        cells = picked
    out = [c for c in cells if all(any(_same(_value(c, k), v) for v in values) for k, values in wanted.items())]
    if wanted and not out and cells:
        for key, values in wanted.items():
            present = list(dict.fromkeys(_value(c, key) for c in cells))
            if not any(_same(p, v) for p in present for v in values):
                shown = ", ".join(_show(p) for p in present if p is not None) or "(the axis is not set)"
                raise ConfigError(f"--only {key}={'|'.join(_show(v) for v in values)}: no cell has that value; "
                                  f"{key} has: {shown}")
        raise ConfigError(f"--only {' '.join(only)}: no cell matches all of these together")
    return out


def _parse_only(only: Sequence[str]) -> dict[str, list[Scalar]]:
    wanted: dict[str, list[Scalar]] = {}
    for item in only:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS:
            raise ConfigError(f"--only {item!r}: expected KEY=VALUE with KEY one of {', '.join(MATCH_KEYS)}")
        typed: Scalar = value
        if key in AXIS_NAMES:
            try:
                typed = _coerce(key, value)
            except ValidationError as e:
                why = e.errors()[0]["msg"].removeprefix("Value error, ")
                raise ConfigError(f"--only {item}: {why}") from None
        wanted.setdefault(key, []).append(typed)
    return wanted


def _value(cell: Cell, key: str) -> Any:
    return cell.env_name if key == "environment" else cell.params.get(key)


def _show(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
