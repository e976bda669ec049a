"""The data the parts pass around: environments, run settings, cells and tasks."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runner.contract import AMP_IMPLS, DATASET_FORMS, DATASET_KINDS, DEVICES, MODELS, PRECISIONS

Scalar = str | int | float | bool
MOST_REPEATS = 1000  # repeats per cell, fixed or adaptive: more is a typo (each is a fresh process)
LONGEST_TIMEOUT = 30 * 86400.0  # seconds per repeat: 30 days; a Slurm time limit is derived from it


class Strict(BaseModel):
    """Every model of matrix.yaml rejects keys it does not know."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Mount(Strict):
    source: str
    target: str
    read_only: bool = True


def percentage(value: Any) -> Any:
    """'1%' -> 0.01; a plain number is already a fraction (0.01) and must be below 1."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return float(value.strip()[:-1]) / 100
        except ValueError:
            raise ValueError(f"{value!r} is not a percentage; write e.g. 1% or 0.01") from None
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
        raise ValueError(f"{value!r} is not a fraction below 1; write a percentage such as {value:g}%")
    return value


class AdaptiveRepeats(Strict):
    """`repeats: {min: 3, max: 20, target_ci: 1%}`: add repeats until the 95% confidence interval of the
    mean throughput is within ±target_ci of the mean, or `max` repeats are stored (runner/adaptive.py)."""

    min: int = Field(3, ge=2, le=MOST_REPEATS)
    max: int = Field(20, ge=2, le=MOST_REPEATS)
    target_ci: float = Field(0.01, gt=0, lt=1)

    _pct = field_validator("target_ci", mode="before")(percentage)

    @model_validator(mode="after")
    def _ordered(self) -> AdaptiveRepeats:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self


def seconds(value: Any) -> Any:
    """'2s', '500ms', '1.5min' or a number of seconds -> seconds (a float); anything else is left to pydantic."""
    if isinstance(value, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|sec|min)?\s*", value)
        if not m:
            raise ValueError(f"{value!r} is not a duration; write e.g. 2s, 500ms, 1.5min or a number of seconds")
        return float(m.group(1)) * {"ms": 0.001, "min": 60.0}.get(m.group(2) or "s", 1.0)
    return value


class AutoIterations(Strict):
    """`iterations: auto` or `{min_time: 2s, min: 5, max: 10000}`: the first repeat of a cell times its warm-up
    and picks the measured iterations for a window of at least `min_time`, within [min, max]; the store keeps
    that count and every later repeat of the cell runs it (docs/statistics.md, "Warm-up and measured windows")."""

    min_time: float = Field(2.0, gt=0, le=86400.0, allow_inf_nan=False, description="seconds")
    min: int = Field(5, ge=1, le=10**9)
    max: int = Field(10000, ge=1, le=10**9)

    _s = field_validator("min_time", mode="before")(seconds)

    @model_validator(mode="after")
    def _ordered(self) -> AutoIterations:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        return self

    def text(self) -> str:
        return f"iterations for at least {self.min_time:g} s ({self.min}-{self.max}, calibrated by a cell's first repeat)"

    def words(self) -> str:
        return f"auto({self.min_time:g}s,{self.min}-{self.max})"


class SteadyWarmup(Strict):
    """`warmup: auto` or `{min: 0, max: 50, max_time: 60s, window: 5, tolerance: 5%}`: warm up until the iteration
    times are steady (runner/bench/timing.py `steady`: the medians of the last two windows of `window` iterations
    agree within `tolerance`, or within what noise explains), after at least `min` iterations and two windows, at
    most `max` iterations or `max_time`; a repeat that reached the ceiling is marked not steady."""

    min: int = Field(0, ge=0, le=10**9)
    max: int = Field(50, ge=1, le=10**9)
    max_time: float | None = Field(60.0, gt=0, le=86400.0, allow_inf_nan=False, description="seconds")
    window: int = Field(5, ge=2, le=10**6)
    tolerance: float = Field(0.05, gt=0, le=1)

    _s = field_validator("max_time", mode="before")(seconds)
    _pct = field_validator("tolerance", mode="before")(percentage)

    @model_validator(mode="after")
    def _ordered(self) -> SteadyWarmup:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) is below min ({self.min})")
        if self.max < 2 * self.window:
            raise ValueError(f"max ({self.max}) cannot hold the two windows of {self.window} iterations the rule "
                             f"compares; allowed: at least {2 * self.window}")
        return self

    def text(self) -> str:
        most = f"{self.max}" + (f" or {self.max_time:g} s" if self.max_time else "")
        return f"a warm-up until steady (at least {max(self.min, 2 * self.window)}, at most {most})"

    def words(self) -> str:
        return f"steady({self.min}-{self.max}" + (f",{self.max_time:g}s" if self.max_time else "") + \
            f",w{self.window},{self.tolerance * 100:g}%)"


def _auto_or_count(model: type[Strict], example: str) -> Callable[[Any], Any]:
    """A before-validator: `auto` is the model's defaults, a mapping the model, a whole number a fixed count."""
    def parse(value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() == "auto":
            return model()
        if isinstance(value, Mapping):
            try:
                return model.model_validate(value)
            except ValidationError as e:
                raise ValueError("; ".join(_model_problem(model, err) for err in e.errors())) from None
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()) or \
                not isinstance(value, int | float | model):
            raise ValueError(f"{value!r} is not allowed; allowed: a whole number, auto, or {example}")
        if isinstance(value, int | float) and not 0 <= value <= 10**9:
            raise ValueError(f"{value!r} is not allowed; allowed: a whole number from 0 to 10**9, auto, or {example}")
        return int(value) if isinstance(value, float) else value
    return parse


def _model_problem(model: type[Strict], err: Any) -> str:
    where = ".".join(map(str, err["loc"]))
    if err["type"] == "extra_forbidden":
        return f"unknown key {err['loc'][-1]!r}; allowed: {', '.join(model.model_fields)}"
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"{where}: {msg}" if where else msg


class RunSettings(Strict):
    iterations: Annotated[int, Field(ge=0, le=10**9)] | AutoIterations = Field(
        50, description="a count, or auto (calibrated by a cell's first repeat)")
    warmup: Annotated[int, Field(ge=0, le=10**9)] | SteadyWarmup = Field(
        10, description="a count, or auto (until steady)")
    repeats: int = Field(3, ge=1, le=MOST_REPEATS, description="repeats every cell gets (the minimum when adaptive)")
    timeout: float = Field(600, gt=0, le=LONGEST_TIMEOUT, allow_inf_nan=False, description="seconds per repeat")
    seed: int = Field(0, description="seeds random, numpy and torch in bench.py (its range: runner/bench/contract.py)")
    interleave: bool = Field(False, description="run repeat 1 of every cell, then repeat 2, ... so that drift in "
                             "the machine falls on every cell alike (environments that run here; a batch "
                             "scheduler orders its own jobs)")
    adaptive: AdaptiveRepeats | None = Field(None, description="set by writing `repeats` as a mapping")

    _iterations = field_validator("iterations", mode="before")(
        _auto_or_count(AutoIterations, "{min_time: 2s, min: 5, max: 10000}"))
    _warmup = field_validator("warmup", mode="before")(
        _auto_or_count(SteadyWarmup, "{min: 0, max: 50, max_time: 60s, window: 5, tolerance: 5%}"))

    @model_validator(mode="after")
    def _calibrate_from_warmup(self) -> RunSettings:
        if isinstance(self.iterations, AutoIterations) and self.warmup == 0:
            raise ValueError("iterations: auto calibrates the window from the warm-up's iteration times: give warmup "
                             "at least 1 (or auto)")
        return self

    @property
    def calibrated(self) -> bool:
        """Whether a cell's first repeat chooses the measured iterations (`iterations: auto`)."""
        return isinstance(self.iterations, AutoIterations)

    @property
    def window_text(self) -> str:
        """'20 iterations after 5 warm-up', or the auto rules in words."""
        it = self.iterations.text() if isinstance(self.iterations, AutoIterations) else f"{self.iterations} iterations"
        wu = self.warmup.text() if isinstance(self.warmup, SteadyWarmup) else f"{self.warmup} warm-up"
        return f"{it} after {wu}"

    def identity(self) -> dict[str, Any]:
        """The run settings in a cell's key: a fixed count as the number it always was (old keys unchanged), an
        auto rule as its definition (never the count a first repeat calibrated)."""
        def ident(value: Any, kind: str) -> Any:
            return {kind: True, **value.model_dump()} if isinstance(value, BaseModel) else value
        return {"iterations": ident(self.iterations, "auto"), "warmup": ident(self.warmup, "steady"),
                "seed": self.seed}

    def bench_options(self) -> dict[str, Any]:
        """The benchmark's options for these settings (runner/bench/args.py), before a calibrated count."""
        out: dict[str, Any] = {}
        it, wu = self.iterations, self.warmup
        if isinstance(it, AutoIterations):
            out.update(window_time=it.min_time, window_min=it.min, window_max=it.max)
        else:
            out["iterations"] = it
        if isinstance(wu, SteadyWarmup):
            out.update(warmup=wu.min, warmup_max=wu.max, steady_window=wu.window, steady_tolerance=wu.tolerance)
            if wu.max_time is not None:
                out["warmup_time"] = wu.max_time
        else:
            out["warmup"] = wu
        out["seed"] = self.seed
        return out

    @property
    def most_repeats(self) -> int:
        """The repeats a cell may get: `repeats`, or the adaptive rule's `max`."""
        return self.adaptive.max if self.adaptive else self.repeats

    @property
    def repeats_text(self) -> str:
        """'3', or '3-20 (adaptive to ±1%)'."""
        a = self.adaptive
        return f"{a.min}-{a.max} (adaptive to ±{a.target_ci * 100:g}%)" if a else str(self.repeats)

    @model_validator(mode="before")
    @classmethod
    def _adaptive_repeats(cls, data: Any) -> Any:
        """`repeats: {min, max, target_ci}` keeps `repeats` the number every cell gets (its minimum), so
        resume and planning count as before, and `adaptive` the rule for adding more."""
        if not isinstance(data, Mapping):
            return data
        if "adaptive" in data:
            raise ValueError("unknown key 'adaptive'; write repeats: {min: 3, max: 20, target_ci: 1%}")
        repeats = data.get("repeats")
        if isinstance(repeats, Mapping):
            try:
                rule = AdaptiveRepeats.model_validate(repeats)
            except ValidationError as e:
                raise ValueError("; ".join(_adaptive_problem(err) for err in e.errors())) from None
            return {**data, "repeats": rule.min, "adaptive": rule}
        return data


def _adaptive_problem(err: Any) -> str:
    """One pydantic error of `repeats: {...}` in the words matrix.py uses, with its field path."""
    where = ".".join(["repeats", *map(str, err["loc"])])
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key {err['loc'][-1]!r}; allowed: {', '.join(AdaptiveRepeats.model_fields)}"
    return f"{where}: {str(err['msg']).removeprefix('Value error, ')}"


class EnvironmentBase(Strict):
    """What every environment has; each backend adds its own fields in a subclass."""

    name: str = Field(min_length=1)
    backend: str
    tags: list[str] = []
    env: dict[str, str] = {}
    mounts: list[Mount] = []
    python: str | None = None
    # This environment's own `workload:` keys over the matrix's (runner/workloads/spec.py validates them);
    # the effective workload is part of each cell's key, not of the environment's identity.
    workload: dict[str, Any] | None = None

    # Fields that change what is measured, besides name/backend/python/env: part of a cell's key.
    measured_fields: ClassVar[tuple[str, ...]] = ()

    @field_validator("name", "tags")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        """Names and tags are written into tables, CSV, Markdown and batch-job keys (tab-separated): one line."""
        for text in value if isinstance(value, list) else [value]:
            if not text.strip():
                raise ValueError("a name or tag cannot be blank")
            if any(unicodedata.category(c) == "Cc" for c in text):
                raise ValueError(f"{text!r}: a name or tag cannot hold a tab, newline or other control character")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_are_strings(cls, value: Any) -> Any:
        """A number given in code becomes its text and null an empty value; a list or mapping is refused (its
        Python spelling is not what anyone means). matrix.yaml's values arrive as written (runner/matrix.py)."""
        if isinstance(value, Mapping):
            return {str(k): ("" if v is None else str(v) if isinstance(v, str | int | float) else v)
                    for k, v in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _env_names_are_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} cannot be an environment variable name (empty, or with '=' or NUL)")
            if "\0" in text:
                raise ValueError(f"{name}: a value cannot hold a NUL character")
        return value

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = {"name": self.name, "backend": self.backend,
                                 "python": self.python, "env": dict(sorted(self.env.items()))}
        for name in self.measured_fields:
            value = getattr(self, name)
            ident[name] = value.model_dump() if isinstance(value, BaseModel) else value
        return ident


class Axes(Strict):
    """The axes of the matrix; a scalar is a one-value axis."""

    free: ClassVar[bool] = False  # WorkloadAxes: model and dataset are the workload's words, other axes allowed

    model: list[str] = ["mnist_cnn"]
    precision: list[Literal[PRECISIONS]] = ["fp32"]  # type: ignore[valid-type]
    batch_size: list[int] = [64]
    dataset: list[str] = ["synthetic"]
    gpus: list[int] = [1]
    nodes: list[int] = [1]
    device: list[Literal[DEVICES]] | None = None  # type: ignore[valid-type]
    channels_last: list[bool] | None = None
    cudnn_benchmark: list[bool] | None = None
    compile: list[bool] | None = None
    workers: list[int] | None = None
    threads: list[int] | None = None
    image_size: list[int] | None = None
    num_classes: list[int] | None = None
    loss_scale: list[float] | None = None
    wrn_depth: list[int] | None = None
    wrn_width: list[int] | None = None
    lr: list[float] | None = None
    amp_impl: list[Literal[AMP_IMPLS]] | None = None  # type: ignore[valid-type]
    breakdown: list[bool] | None = None
    eval_batches: list[int] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _scalar_is_one_value(cls, value: Any) -> Any:
        if value is None or isinstance(value, list):
            return value
        return [value]

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: list[str]) -> list[str]:
        if cls.free:
            return value  # a workload's own model names
        for m in value:
            if m not in MODELS:
                raise ValueError(f"unknown model {m!r}; allowed: {', '.join(MODELS)}")
        return value

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, value: list[str]) -> list[str]:
        if cls.free:
            return value
        for d in value:
            kind, _, arg = d.partition(":")
            if not (d == "synthetic" or (kind in DATASET_KINDS and arg)):
                raise ValueError(f"unknown dataset {d!r}; allowed: {', '.join(DATASET_FORMS)}")
        return value

    @field_validator("*")
    @classmethod
    def _not_empty(cls, value: Any) -> Any:
        if value is not None and not value:
            raise ValueError("an empty list gives no cells; give at least one value, or leave the axis out")
        return value

    @field_validator("batch_size", "gpus", "nodes")
    @classmethod
    def _positive(cls, value: list[int]) -> list[int]:
        if any(v < 1 for v in value):
            raise ValueError("values must be 1 or more")
        return value


AXIS_NAMES = tuple(Axes.model_fields)
# A workload's own axes: written like `steps: [10, 20]`, and used as {steps} in its argv.
RESERVED_AXES = ("environment", "python", "files", "output", "iterations", "warmup", "seed", "repeat")
FreeValue = bool | int | float | str


class WorkloadAxes(Axes):
    """The axes of a matrix whose environments run a workload: bench's axes keep their types (precision,
    batch size and the process layout mean the same to reports), model and dataset are free text, and
    any other name is an axis of the workload's own, a list of scalars."""

    model_config = ConfigDict(extra="allow", frozen=True)
    free: ClassVar[bool] = True

    @model_validator(mode="before")
    @classmethod
    def _own_axes(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for name, value in data.items():
            if name in cls.model_fields:
                continue
            if not isinstance(name, str) or not name.isidentifier() or name.startswith("_"):
                raise ValueError(f"axis {name!r}: an axis of your own is a name of letters, digits and _ "
                                 "(it is a placeholder in the workload's argv)")
            if name in RESERVED_AXES:
                raise ValueError(f"axis {name!r}: that name is filled by matrix ({', '.join(RESERVED_AXES)})")
            values = value if isinstance(value, list) else [value]
            if not values:
                raise ValueError(f"axis {name!r}: an empty list gives no cells; give at least one value")
            for v in values:
                if v is None or not isinstance(v, bool | int | float | str):
                    raise ValueError(f"axis {name!r}: {v!r} is not a scalar (text, number or true/false)")
            out[name] = values
        return out

    def own(self) -> dict[str, list[FreeValue]]:
        """The workload's own axes, in the order written."""
        return dict(self.model_extra or {})

    def written(self) -> dict[str, list[Any]]:
        """Every axis the file wrote (no defaults: a workload has no model or batch size unless it says so)."""
        dumped = self.model_dump()
        fields = type(self).model_fields
        return {k: dumped[k] for k in [*fields, *self.own()] if k in self.model_fields_set or k in self.own()}
LAYOUT_AXES = ("gpus", "nodes")  # how many processes a backend starts, not bench.py options


def shown_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The params worth showing a person: a process layout of 1 is the default and says nothing."""
    return {k: v for k, v in params.items() if not (k in LAYOUT_AXES and v == 1)}


def stable_hash(obj: Any, length: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Cell:
    """One environment times one point of the axes."""

    environment: EnvironmentBase
    params: Mapping[str, Scalar]
    run: RunSettings
    workload: Any = None  # runner.workloads.Workload: the environment's program instead of bench

    @property
    def env_name(self) -> str:
        return self.environment.name

    @cached_property
    def key(self) -> str:
        """Computed once: the hash of the environment's identity, params and run settings (expansion, plan,
        todo and the store ask for it again and again)."""
        ident: dict[str, Any] = {
            "environment": self.environment.identity(),
            "params": dict(sorted(self.params.items())),
            "run": self.run.identity(),
        }
        if self.workload is not None:  # its argv template, parser and file contents: a new script is a new cell
            ident["workload"] = self.workload.identity()
        return stable_hash(ident)

    @property
    def gpus(self) -> int:
        return int(self.params.get("gpus", 1))

    @property
    def nodes(self) -> int:
        return int(self.params.get("nodes", 1))

    def bench_args(self, iterations: int | None = None) -> list[str]:
        """bench.py's arguments for this cell (docs/internals.md); `iterations`: the count a first repeat
        calibrated (iterations: auto), else the repeat calibrates it."""
        args: list[str] = []
        for name, value in self.run.bench_options().items():
            args += ["--" + name.replace("_", "-"), repr(value) if isinstance(value, float) else str(value)]
        if iterations is not None and self.run.calibrated:
            args += ["--iterations", str(iterations)]
        for name, value in self.params.items():
            if name in LAYOUT_AXES or value is None or value is False:
                continue
            flag = "--" + name.replace("_", "-")
            args += [flag] if value is True else [flag, str(value)]
        return args

    def label(self) -> str:
        return f"{self.env_name} " + " ".join(f"{k}={v}" for k, v in shown_params(self.params).items())


@dataclass(frozen=True)
class Task:
    """One repeat of one cell: one fresh bench process (or one per GPU and node). `iterations`: the count the
    cell's first repeat calibrated (iterations: auto; None: this repeat calibrates, or the count is fixed)."""

    cell: Cell
    repeat: int
    iterations: int | None = field(default=None, compare=False)

    def bench_args(self) -> list[str]:
        return self.cell.bench_args(self.iterations)

    @property
    def id(self) -> str:
        return f"{self.cell.key}-r{self.repeat}"


@dataclass
class RunContext:
    """What a backend needs to know about the run it serves."""

    run_id: str
    workdir: Path
    stop: threading.Event = field(default_factory=threading.Event)
    wait: bool = True     # False: submit (batch backends) and return without waiting
    back_later: bool = False  # with wait False: this same run comes back to collect (say so, not `collect`)
    submit: bool = True   # False: only collect what earlier runs submitted
    verbose: bool = False
    on_start: Any = None  # callable(Task) -> None, told when a task starts (progress display)
    store: Any = None     # the run's result store (runner.store.Store): batch backends keep their jobs there
    claim: Any = None     # callable(Task) -> bool: claims the repeat in the store; False: another run has it
    prepare: Any = None   # callable(Task) -> Task: the task as it runs (its cell's calibrated count), after its claim
