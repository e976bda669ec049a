"""How a figure is read from a stored result (its metrics and raw documents), in stored units (NaN: not measured).
Each metric of runner/record/metrics.py names its reader here, or reads its own field with `number`. Read for every
repeat a site plots, so the common cases come first."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

# A reader: a result's metrics and raw documents -> one figure in stored units (NaN: not measured).
Reader = Callable[[Mapping[str, Any], Mapping[str, Any] | None], float]


def number(value: Any) -> float:
    """A stored figure as a float; NaN (not measured) when it is none, not a number or not finite: an infinite
    throughput is no measurement, and every command reads the frame, so none pairs or tests it."""
    if type(value) is float:  # the common case first: the site reads 100,000 repeats' figures
        return value if math.isfinite(value) else math.nan
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return x if math.isfinite(x) else math.nan


def ran_program(raw: Mapping[str, Any] | None) -> bool:
    """Whether a stored result is a workload's (the launcher's `workload` record names its parser; bench's
    own `workload` record describes its model's input)."""
    record = (raw or {}).get("workload") if isinstance(raw, dict | Mapping) else None
    return record is not None and isinstance(record, dict | Mapping) and "parser" in record


def field(name: str) -> Reader:
    """The reader of a figure the result stores under its own name (metrics.<name>)."""
    def read(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
        return number(metrics.get(name))
    read.__name__ = f"field_{name}"
    return read


def iter_time(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    """Seconds per training step: the mean of the window's iteration times, else the window over its iterations."""
    times = metrics.get("iter_times")
    if isinstance(times, list) and times:
        if set(map(type, times)) == {float}:  # the common case, read without a loop in Python
            return sum(times) / len(times)
        vals = [float(t) for t in times if isinstance(t, int | float)]
        if vals:
            return sum(vals) / len(vals)
    if ran_program(raw):
        return math.nan  # a user's program ran its own steps, not run.iterations: no time/iter unless it said
    iterations = ((raw or {}).get("params") or {}).get("iterations")
    window = number(metrics.get("window_s"))
    if isinstance(iterations, int) and iterations > 0 and not math.isnan(window):
        return window / iterations
    return math.nan


def phase_throughput(phase: str) -> Reader:
    """Images of the window over the time spent in one phase (bench --breakdown), NaN without it."""
    def read(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
        breakdown = metrics.get("breakdown")
        if breakdown is None:
            return math.nan
        seconds = number(breakdown.get(f"{phase}_s")) if isinstance(breakdown, dict | Mapping) else math.nan
        images = number(metrics.get("images"))
        return images / seconds if seconds > 0 and not math.isnan(images) else math.nan
    read.__name__ = f"{phase}_throughput"
    return read


def peak_memory(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    """Bytes: the allocator's peak allocated, else its peak reserved."""
    peak = number(metrics.get("peak_mem_allocated"))
    return number(metrics.get("peak_mem_reserved")) if math.isnan(peak) else peak


def data_wait_share(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    """The share of the measured window spent waiting for the data loader."""
    window = number(metrics.get("window_s"))
    wait = number(metrics.get("data_wait_s"))
    return wait / window if window > 0 and not math.isnan(wait) else math.nan
