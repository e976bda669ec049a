"""matrix.yaml: load with safe_load's constructors, validate with pydantic, expand into cells."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runner import backends
from runner.base.errors import ConfigError
from runner.domain import bench_contract as contract
from runner.domain import yamltext as yt
from runner.domain.cellmatch import AXES, MATCH_KEYS, matches, typed_rule

# Kept importable from here: the commands pick cells with `matrix.select` (runner.domain.cellmatch is its home).
from runner.domain.cellmatch import select as select
from runner.domain.cells import (
    AXIS_NAMES,
    RESERVED_AXES,
    Axes,
    Cell,
    EnvironmentBase,
    FreeValue,
    RunSettings,
    Scalar,
    Strict,
    WorkloadAxes,
)
from runner.domain.defaults import MAX_CELLS
from runner.domain.fileproblems import format_errors, line

DEFAULT_MATRIX = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"


class MatrixFile(Strict):
    """The top level of matrix.yaml; environments are validated by their backend's model."""

    name: str | None = None
    description: str | None = None
    environments: list[dict[str, Any]]
    axes: Axes = Axes()
    include: list[dict[str, Scalar]] = []
    exclude: list[dict[str, Scalar]] = []
    run: RunSettings = RunSettings()
    references: Any = None  # validated by runner/analysis/references.py
    gate: Any = None  # validated by runner/analysis/gate_entries.py
    workload: Any = None  # validated by runner/backends/workloads/config.py, merged with each environment's own


class WorkloadMatrixFile(MatrixFile):
    """A matrix whose environments run a workload: its axes may name the workload's own."""

    axes: WorkloadAxes = WorkloadAxes()


@dataclass(frozen=True)
class Matrix:
    path: Path | None
    name: str
    environments: tuple[EnvironmentBase, ...]
    axes: Axes
    include: tuple[dict[str, Scalar], ...]
    exclude: tuple[dict[str, Scalar], ...]
    run: RunSettings
    references: tuple[Any, ...] = ()  # runner.analysis.references.Reference
    gates: tuple[Any, ...] = ()  # runner.analysis.gate_entries.GateEntry
    workloads: Mapping[str, Any] = field(default_factory=dict)  # environment name -> runner.backends.workloads.Workload

    @property
    def own_axes(self) -> tuple[str, ...]:
        """The names of the workload's own axes (none for bench)."""
        return tuple(self.axes.own()) if isinstance(self.axes, WorkloadAxes) else ()

    def environment(self, name: str) -> EnvironmentBase:
        for env in self.environments:
            if env.name == name:
                return env
        raise ConfigError(f"no environment {name!r}; environments: {', '.join(e.name for e in self.environments)}")

    def cells(self) -> list[Cell]:
        cells = expand(self)
        if not cells:
            where = self.path or "the matrix"
            raise ConfigError(f"{where}: exclude: the rules remove every cell; nothing would run")
        return cells

    def size(self) -> int:
        """How many cells expansion can give at most: environments x every axis's values, plus includes."""
        lengths = [len(v) for v in self.axes.model_dump().values() if v is not None]
        return len(self.environments) * (math.prod(lengths) + len(self.include))

    def size_text(self) -> str:
        """'2 environments x batch_size 1000 x lr 500': the factors of size(), the axes with several values."""
        envs = len(self.environments)
        parts = [f"{envs} environment{'s' if envs != 1 else ''}"]
        parts += [f"{k} {len(v)}" for k, v in self.axes.model_dump().items() if v is not None and len(v) > 1]
        return " x ".join(parts) + (f" + {len(self.include)} include rules" if self.include else "")


# Loading and errors -----------------------------------------------------------------------------
def load(path: Path | str | None, max_cells: int = MAX_CELLS) -> Matrix:
    """Read and validate a matrix file; every mistake becomes one ConfigError naming file and field."""
    path = Path(path) if path else DEFAULT_MATRIX
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such matrix file (try `-m examples/quickstart.yaml`)") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a folder; -m takes a matrix file such as examples/quickstart.yaml") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not a matrix file: byte {e.start} is not UTF-8 text") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read ({e.strerror})") from e
    return parse(text, path, max_cells=max_cells)


def _runs_workload(data: Mapping[str, Any]) -> bool:
    """Whether the file declares a workload, at the top or in an environment."""
    envs = data.get("environments")
    return data.get("workload") is not None or (isinstance(envs, list) and any(
        isinstance(e, dict) and e.get("workload") is not None for e in envs))


def parse(text: str, path: Path | None = None, name: str | None = None, max_cells: int = MAX_CELLS) -> Matrix:
    where = str(path) if path else "<matrix>"
    data, root = yt.load(text, where)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with `environments` and `axes` at the top level")
    workload = _runs_workload(data)
    token = AXES.set(WorkloadAxes if workload else Axes)
    try:
        return _parse(text, data, root, where, path, name, max_cells, workload)
    finally:
        AXES.reset(token)


def _parse(text: str, data: dict[str, Any], root: yaml.Node | None, where: str, path: Path | None,
           name: str | None, max_cells: int, workload: bool) -> Matrix:
    problems: list[str] = []
    data = _as_written(data, root, lambda loc: line(where, text, loc), problems, workload)
    if problems:
        raise ConfigError("\n".join(problems))
    top_model = WorkloadMatrixFile if workload else MatrixFile
    try:
        top = top_model.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(where, text, e, (), top_model)) from e
    envs: list[EnvironmentBase] = []
    for i, raw in enumerate(top.environments):
        kind = raw.get("backend", "local") if isinstance(raw, dict) else None
        try:
            cls = backends.get(str(kind))
        except ConfigError as e:
            problems.append(line(where, text, ("environments", i, "backend")) + f": {e}")
            continue
        try:
            envs.append(cls.config.model_validate({**raw, "backend": kind}))
        except ValidationError as e:
            problems.append(format_errors(where, text, e, ("environments", i), cls.config))
    names = [e.name for e in envs]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{where}: environments: the name {dup!r} is used twice; names must be unique")
    if not top.environments:
        problems.append(f"{where}: environments: at least one environment is needed")
    own = tuple(top.axes.own()) if isinstance(top.axes, WorkloadAxes) else ()
    for field_name in ("include", "exclude"):
        for i, rule in enumerate(getattr(top, field_name)):
            problems += _check_rule(where, text, field_name, i, rule, set(names), own)
    if problems:
        raise ConfigError("\n".join(problems))
    workloads = _workloads(top, envs, path, lambda loc: line(where, text, loc)) if workload else {}
    problems = [line(where, text, loc) + f": {why}" for loc, why in
                (_workload_refuses(top.run) if workload else _bench_refuses(top))]
    if problems:
        raise ConfigError("\n".join(problems))
    stem = path.stem if path else "matrix"
    m = Matrix(path, name or top.name or stem, tuple(envs), top.axes, tuple(map(typed_rule, top.include)),
               tuple(map(typed_rule, top.exclude)), top.run, workloads=workloads)
    check_size(m, max_cells)
    problems = [line(where, text, loc) + f": {why}" for loc, why in
                (_placeholders_unset(m, envs) if workload else _bench_refuses_together(m))]
    if problems:
        raise ConfigError("\n".join(problems))
    if top.references:
        from runner.analysis import references  # pandas: only for files that have references

        def locate(loc: Sequence[Any]) -> str:
            return line(where, text, loc)

        refs = references.parse(top.references, locate, m.own_axes)
        references.check_matches(refs, expand(m), locate)
        m = replace(m, references=refs)
    if top.gate:
        from runner.analysis import gate_entries  # pandas: only for files that have a gate

        m = replace(m, gates=gate_entries.parse(top.gate, lambda loc: line(where, text, loc), top.environments))
    return m


def _workload_refuses(run: RunSettings) -> list[tuple[tuple[Any, ...], str]]:
    """`iterations: auto` and a warm-up until steady are rules of matrix's own benchmark, which times every
    iteration; a workload's program times itself, so its {iterations} and {warmup} are counts."""
    out: list[tuple[tuple[Any, ...], str]] = []
    if run.calibrated:
        out.append((("run", "iterations"), "a workload takes a count (auto calibrates matrix's own benchmark, "
                    "which times each iteration; a workload's program times itself)"))
    if not isinstance(run.warmup, int):
        out.append((("run", "warmup"), "a workload takes a count (a warm-up until steady is matrix's own "
                    "benchmark's rule; a workload's program times itself)"))
    return out


def _workloads(top: MatrixFile, envs: Sequence[EnvironmentBase], path: Path | None,
               locate: yt.Locate) -> dict[str, Any]:
    """Each environment's workload (its own keys over the matrix's), checked: one ConfigError with every problem."""
    from runner.backends.workloads import config as workload_config

    base = path.resolve().parent if path else Path.cwd()
    axis_names = [*AXIS_NAMES, *top.axes.own()] if isinstance(top.axes, WorkloadAxes) else list(AXIS_NAMES)
    axis_names += [k for rule in top.include for k in rule if k != "environment"]
    found: dict[str, Any] = {}
    problems: list[str] = []
    cache: dict[str, Any] = {}
    for i, env in enumerate(envs):
        raw = workload_config.merged(top.workload, env.workload)
        prefix: tuple[Any, ...] = ("environments", i, "workload") if env.workload is not None else ("workload",)
        if raw is None:
            problems.append(locate(("environments", i)) + ": this environment runs no workload while others do; "
                            "give it one (workload: {...}) or put it in a matrix file of its own")
            continue
        ident = repr(raw)
        if ident not in cache:
            cache[ident] = workload_config.resolve(raw, base, axis_names)
        workload, why = cache[ident]
        if workload is None:
            problems += [locate((*prefix, *loc)) + f": {text}" for loc, text in why]
            if env.workload is None:
                break  # the matrix's workload: said once, not once per environment
            continue
        found[env.name] = workload
    if problems:
        raise ConfigError("\n".join(dict.fromkeys(problems)))
    return found


def _placeholders_unset(m: Matrix, envs: Sequence[EnvironmentBase]) -> list[tuple[tuple[Any, ...], str]]:
    """(field path, why) for a placeholder that some cell has no value for (an axis only an include sets)."""
    from runner.backends.workloads.config import BUILTIN_PLACEHOLDERS

    index = {e.name: i for i, e in enumerate(envs)}
    found: dict[tuple[Any, ...], str] = {}
    for cell in expand(m):
        missing = sorted(cell.workload.uses() - set(cell.params) - set(BUILTIN_PLACEHOLDERS))
        why = None if missing else cell.workload.cell_problem(cell.params)
        if why:
            i = index[cell.env_name]
            found.setdefault(("environments", i, "workload", "parser") if envs[i].workload else ("workload", "parser"),
                             f"cell {cell.label()!r}: {why}")
        if missing:
            i = index[cell.env_name]
            loc = ("environments", i, "workload", "argv") if envs[i].workload else ("workload", "argv")
            found.setdefault(loc, f"{{{missing[0]}}} has no value in cell {cell.label()!r} (an axis that only an "
                                  "include sets, or none at all); give the axis a value for every cell")
    return list(found.items())


def _bench_refuses(top: MatrixFile) -> list[tuple[tuple[Any, ...], str]]:
    """(field path, why) for each value bench's argument rules refuse (runner/bench/contract.py): the axes,
    the values an include adds, and the run's iterations, warmup and seed (and their auto rules' bounds)."""
    found: list[tuple[tuple[Any, ...], str]] = []
    for axis, values in top.axes.model_dump().items():
        for i, value in enumerate(values or ()):
            why = contract.value_problem(axis, value)
            if why:
                found.append((("axes", axis, i), why))
    for i, rule in enumerate(top.include):
        for key, value in typed_rule(rule).items():
            why = contract.value_problem(key, value)
            if why:
                found.append((("include", i, key), why))
    for option, value in top.run.bench_options().items():
        why = contract.value_problem(option, value)
        if why:
            found.append((("run", RUN_FIELDS.get(option, option)), why))
    return found


# The run setting a bench option comes from (runner/domain/cells.py RunSettings.bench_options).
RUN_FIELDS = {"window_time": "iterations", "window_min": "iterations", "window_max": "iterations",
              "warmup_max": "warmup", "warmup_time": "warmup", "steady_window": "warmup", "steady_tolerance": "warmup"}


def _bench_refuses_together(m: Matrix) -> list[tuple[tuple[Any, ...], str]]:
    """(field path, why) for each combination of allowed values that bench refuses, over the cells that exist
    (an image size below what a model takes); the grid is expanded only when such a pair can occur."""
    models = {*(m.axes.model or ()), *(r["model"] for r in m.include if "model" in r)}
    sizes = {*(m.axes.image_size or ()), *(r["image_size"] for r in m.include if "image_size" in r)}
    pairs = [{"image_size": s} for s in sizes]  # with the transformer's: sequence length and token data
    for axis in ("seq_len", "dataset"):
        pairs += [{axis: v} for v in {*(getattr(m.axes, axis) or ()), *(r[axis] for r in m.include if axis in r)}]
    if not any(contract.cell_problem({"model": mo, **pair}) for mo in models for pair in pairs):
        return []
    found: dict[tuple[Any, ...], str] = {}
    for cell in expand(m):
        problem = contract.cell_problem(cell.params)
        if problem:
            option, why = problem
            value = cell.params[option]
            listed = list(getattr(m.axes, option) or ())
            loc: tuple[Any, ...] = (("axes", option, listed.index(value)) if value in listed else
                                    next((("include", i, option) for i, r in enumerate(m.include)
                                          if r.get(option) == value), ("axes", option)))
            found.setdefault(loc, why)
    return list(found.items())
def check_size(m: Matrix, max_cells: int) -> None:
    """Refuse a matrix larger than max_cells before expanding it (a typo such as `batch_size: [1..1000]` written
    out, or two long axes, multiplies), naming the factors."""
    size = m.size()
    if size > max_cells:
        where = m.path or "the matrix"
        raise ConfigError(f"{where}: axes: up to {size:,} cells ({m.size_text()}), more than the limit of "
                          f"{max_cells:,}; check the axes for a typo, or pass --max-cells {size} to mean it")


def _as_written(data: dict[str, Any], root: yaml.Node | None, locate: yt.Locate, problems: list[str],
                workload: bool = False) -> dict[str, Any]:
    """The file's data with every text field as the user typed it (an `env:` value `yes` stays "yes", not
    "True") and numbers YAML 1.1 reads otherwise than they look (010, 1:30) refused: runner/domain/yamltext.py."""
    walk = yt.Walk(locate)
    items: dict[str, Any] = {a: yt.list_item(f.annotation) for a, f in Axes.model_fields.items()}
    if workload:
        items["*"] = FreeValue  # a workload's own axis: `010` is refused as octal, text stays as written
    rule = {"environment": str, **items}
    shape: yt.Shape = {name: f.annotation for name, f in MatrixFile.model_fields.items()}
    shape.update(environments=Any, include=list[rule], exclude=list[rule], references=Any, gate=Any,  # type: ignore[valid-type]
                 workload=Any)
    if workload:
        shape["axes"] = {a: f.annotation for a, f in Axes.model_fields.items()} | {"*": list[FreeValue]}  # type: ignore[valid-type]
    out = walk.value(data, root, shape, ())
    envs, envs_node = out.get("environments"), yt.child(root, "environments")
    if isinstance(envs, list) and isinstance(envs_node, yaml.SequenceNode) and len(envs) == len(envs_node.value):
        out["environments"] = [walk.value(raw, node, _environment_model(raw) or Any, ("environments", i))
                               for i, (raw, node) in enumerate(zip(envs, envs_node.value, strict=True))]
    if out.get("references"):
        from runner.analysis.references import Bound  # pandas: only for files that have references

        match = {"environment": str | list[str], **{a: t | list[t] for a, t in items.items()}}  # type: ignore[valid-type]
        entry = {"match": match, "*": str | Bound}
        out["references"] = walk.value(out["references"], yt.child(root, "references"), list[entry], ("references",))  # type: ignore[valid-type]
    problems += walk.problems
    return out


def _environment_model(raw: Any) -> type[BaseModel] | None:
    """The pydantic model of one raw environment entry (its backend's), or None for an unknown backend."""
    kind = raw.get("backend", "local") if isinstance(raw, dict) else None
    try:
        return backends.get(str(kind)).config
    except ConfigError:
        return None


def _check_rule(where: str, text: str, field_name: str, i: int, rule: dict[str, Scalar],
                env_names: set[str], own: Sequence[str] = ()) -> list[str]:
    problems = []
    keys = (*MATCH_KEYS, *own)
    if not rule:
        problems.append(line(where, text, (field_name, i)) + f": an empty rule matches every cell; name at least "
                        f"one of {', '.join(keys)}")
    for key in rule:
        if key in keys:
            pass
        elif field_name == "include" and AXES.get().free and key.isidentifier() and key not in RESERVED_AXES:
            pass  # an include may add an axis of the workload's own to the cells it matches
        else:
            problems.append(line(where, text, (field_name, i, key))
                            + f": unknown key {key!r}; allowed: {', '.join(keys)}")
        if key not in AXIS_NAMES and key != "environment" and not isinstance(rule[key], bool | int | float | str):
            problems.append(line(where, text, (field_name, i, key)) + ": expected one scalar value")
    if "environment" in rule and rule["environment"] not in env_names:
        problems.append(line(where, text, (field_name, i, "environment"))
                        + f": no environment {rule['environment']!r}; allowed: {', '.join(sorted(env_names))}")
    axes = {k: v for k, v in rule.items() if k in AXIS_NAMES}
    try:
        AXES.get().model_validate(axes)
    except ValidationError as e:
        problems.append(format_errors(where, text, e, (field_name, i), Axes, strip_index=True))
    return problems


# Expansion --------------------------------------------------------------------------------------
def expand(m: Matrix) -> list[Cell]:
    """Every environment times the product of the axes, then exclude, then include (GitHub semantics).

    An include entry adds its extra keys to each combination whose original axis values it
    matches; one that matches none becomes a new combination (axes it omits take their first
    value, and it applies to every environment unless it names one).
    """
    if isinstance(m.axes, WorkloadAxes):
        axes = m.axes.written()  # no defaults: a workload has the axes its file writes, no others
    else:
        axes = {k: v for k, v in m.axes.model_dump().items() if v is not None}
    names = list(axes)
    original = ("environment", *names)
    rows: list[dict[str, Any]] = []
    for env in m.environments:
        for values in itertools.product(*axes.values()):
            rows.append({"environment": env.name, **dict(zip(names, values, strict=True))})
    rows = [r for r in rows if not any(matches(r, ex, ex.keys()) for ex in m.exclude)]
    for inc in m.include:
        added = False
        for row in rows:
            if matches(row, inc, original):
                row.update({k: v for k, v in inc.items() if k not in original})
                added = True
        if not added:
            targets = [inc["environment"]] if "environment" in inc else [e.name for e in m.environments]
            for env_name in targets:
                rows.append({**{k: v[0] for k, v in axes.items()}, **inc, "environment": env_name})
    cells: list[Cell] = []
    seen: set[str] = set()
    by_name = {e.name: e for e in m.environments}
    for row in rows:
        name = str(row.pop("environment"))
        env = by_name.get(name) or m.environment(name)
        # Typed already: axis values by Axes, include values by typed_rule when the file was read.
        params = {k: row[k] for k in AXIS_NAMES if k in row}
        if m.workloads:  # the workload's own axes, and what an include adds, after bench's
            params.update((k, v) for k, v in row.items() if k not in params)
        cell = Cell(env, params, m.run, m.workloads.get(name))
        if cell.key not in seen:
            seen.add(cell.key)
            cells.append(cell)
    return cells


