"""The data the parts pass around: environments, run settings, cells and tasks."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from runner.domain.bench_contract import (
    AMP_IMPLS,
    ATTENTION_BACKENDS,
    COMPILE_MODES,
    DATASET_FORMS,
    DATASET_KINDS,
    DEVICES,
    FP8_IMPLS,
    FP8_RECIPES,
    LOSS_IMPLS,
    MODELS,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PRECISIONS,
)
from runner.domain.defaults import LAYOUT_AXES as LAYOUT_AXES
from runner.domain.defaults import shown_params as shown_params

# The `run:` settings and the models' base live below this module; the parts import them from here.
from runner.domain.runsettings import AdaptiveRepeats as AdaptiveRepeats
from runner.domain.runsettings import AutoIterations as AutoIterations
from runner.domain.runsettings import RunSettings as RunSettings
from runner.domain.runsettings import SteadyWarmup as SteadyWarmup
from runner.domain.runsettings import percentage as percentage
from runner.domain.runsettings import seconds as seconds
from runner.domain.strict import LONGEST_TIMEOUT as LONGEST_TIMEOUT
from runner.domain.strict import MOST_REPEATS as MOST_REPEATS
from runner.domain.strict import Scalar as Scalar
from runner.domain.strict import Strict as Strict


class Mount(Strict):
    source: str
    target: str
    read_only: bool = True


class EnvironmentBase(Strict):
    """What every environment has; each backend adds its own fields in a subclass."""

    name: str = Field(min_length=1)
    backend: str
    tags: list[str] = []
    env: dict[str, str] = {}
    mounts: list[Mount] = []
    python: str | None = None
    # This environment's own `workload:` keys over the matrix's (runner/backends/workloads/config.py validates them);
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
        Python spelling is not what anyone means). matrix.yaml's values arrive as written (runner/matrix/__init__.py)."""
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
    optimizer: list[Literal[OPTIMIZERS]] | None = None  # type: ignore[valid-type]
    optimizer_impl: list[Literal[OPTIMIZER_IMPLS]] | None = None  # type: ignore[valid-type]
    compile_mode: list[Literal[COMPILE_MODES]] | None = None  # type: ignore[valid-type]
    cuda_graphs: list[bool] | None = None
    # The transformer's axes (models gpt_*): tokens per sequence, attention implementation, FP8 mechanism.
    seq_len: list[int] | None = None
    attention: list[Literal[ATTENTION_BACKENDS]] | None = None  # type: ignore[valid-type]
    fp8_impl: list[Literal[FP8_IMPLS]] | None = None  # type: ignore[valid-type]
    fp8_recipe: list[Literal[FP8_RECIPES]] | None = None  # type: ignore[valid-type]
    loss_impl: list[Literal[LOSS_IMPLS]] | None = None  # type: ignore[valid-type]
    checkpoint: list[bool] | None = None

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
def stable_hash(obj: Any, length: int = 12) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Cell:
    """One environment times one point of the axes."""

    environment: EnvironmentBase
    params: Mapping[str, Scalar]
    run: RunSettings
    workload: Any = None  # runner.backends.workloads.Workload: the environment's program instead of bench

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
