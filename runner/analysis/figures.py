"""A stored repeat's figures, one per metric in stored units (NaN: not measured), from its result's metrics: what the
long frame (runner/analysis/frame.py) has as columns and what admission's bounds judge (runner/analysis/admission.py).
Read for every repeat a site plots, so the common cases come first."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


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
    return record is not None and isinstance(record, Mapping) and "parser" in record


def _iter_time(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    times = metrics.get("iter_times")
    if isinstance(times, list) and times:
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


def _phase_throughput(metrics: Mapping[str, Any], phase: str) -> float:
    """Images of the window over the time spent in one phase (bench --breakdown), NaN without it."""
    breakdown = metrics.get("breakdown")
    if breakdown is None:
        return math.nan
    seconds = number(breakdown.get(f"{phase}_s")) if isinstance(breakdown, Mapping) else math.nan
    images = number(metrics.get("images"))
    return images / seconds if seconds > 0 and not math.isnan(images) else math.nan


def figures(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> dict[str, float]:
    """A stored repeat's figures in stored units, one per metric (NaN: not measured): the frame's columns, and what
    admission's bounds judge."""
    window = number(metrics.get("window_s"))
    wait = number(metrics.get("data_wait_s"))
    peak = number(metrics.get("peak_mem_allocated"))
    if math.isnan(peak):
        peak = number(metrics.get("peak_mem_reserved"))
    return {"throughput": number(metrics.get("throughput")), "iter_time": _iter_time(metrics, raw),
            "fwd_throughput": _phase_throughput(metrics, "forward"),
            "bwd_throughput": _phase_throughput(metrics, "backward"),
            "window_s": window, "peak_mem": peak, "loss_end": number(metrics.get("loss_end")),
            "accuracy": number(metrics.get("accuracy")),
            "data_wait": wait / window if window > 0 and not math.isnan(wait) else math.nan,
            "images_per_joule": number(metrics.get("images_per_joule")), "mfu": number(metrics.get("mfu"))}
