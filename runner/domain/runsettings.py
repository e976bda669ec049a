"""The `run:` settings of matrix.yaml: repeats, timeouts, iterations and warm-up (counts or rules), adaptive
repeats."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from runner.domain.strict import LONGEST_TIMEOUT, MOST_REPEATS, Strict


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
    mean throughput is within ±target_ci of the mean, or `max` repeats are stored (runner/analysis/adaptive.py).
    `until: decided` aims at a decision instead: repeats are added to the cells whose checks (the file's `gate:` and
    `references:`) are undecided, until every check is decided or `max` is reached (runner/execution/decided_rounds.py)."""

    min: int = Field(3, ge=2, le=MOST_REPEATS)
    max: int = Field(20, ge=2, le=MOST_REPEATS)
    target_ci: float = Field(0.01, gt=0, lt=1)
    until: Literal["ci", "decided"] = "ci"

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
        if a and a.until == "decided":
            return f"{a.min}-{a.max} (until the gate and references are decided)"
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
