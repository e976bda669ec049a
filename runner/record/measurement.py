"""How a stored repeat was measured, read from its record: how its warm-up ended, its window, its steps and losses
along the way, what its CPU did natively (the frame's MEASURE_COLUMNS, runner/analysis/frame.py; `Repeat.steps`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from runner.record.readers import number as _num
from runner.record.readers import ran_program
from runner.record.stored import StoredRepeat


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict | Mapping) else {}


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measured(r: StoredRepeat) -> dict[str, Any]:
    """The MEASURE_COLUMNS of one stored repeat: how its warm-up ended, its window, what its CPU did natively."""
    metrics = r.metrics
    raw = _mapping(r.raw)
    params = _mapping(raw.get("params"))
    warm = _mapping(metrics.get("warmup"))
    warmup_iters = _int_or_none(warm.get("iterations"))
    program = ran_program(raw)  # a workload: only what the program itself reported
    if warmup_iters is None and params.get("warmup_max") is None and not program:
        warmup_iters = _int_or_none(params.get("warmup"))  # a result from before warm-up was recorded: fixed
    window = _int_or_none(metrics.get("iterations"))
    if window is None and not program:
        window = _int_or_none(params.get("iterations"))
    steps = _int_or_none(metrics.get("steps"))
    if steps is None and warmup_iters is not None and window is not None and params.get("warmup_max") is None:
        steps = warmup_iters + window
    steady = warm.get("steady")
    record = raw.get("precision")
    found = record.get("cpu_math") if isinstance(record, dict | Mapping) else None
    cpu: Mapping[str, Any] = found if isinstance(found, dict | Mapping) else {}
    native = cpu.get("native")
    return {"warmup_iters": warmup_iters, "steady": steady if isinstance(steady, bool) else None,
            "warmup_how": str(warm.get("how") or ("fixed" if warmup_iters is not None else "")),
            "window_iters": window, "steps": steps, "calibrated": _calibrated(metrics.get("calibration")),
            "cpu_native": native if isinstance(native, bool) else None, "cpu_math": str(cpu.get("unit") or ""),
            "cpu_why": str(cpu.get("why") or ""), "load": _num(metrics.get("load_avg")),
            "loss_at": _loss_at(metrics.get("loss_at"))}


def _calibrated(record: Any) -> bool:
    """This repeat chose its cell's count (bench's calibration record without `given`: a later repeat, run with the
    count a first one chose, carries the record too, `given` set)."""
    return isinstance(record, dict | Mapping) and record.get("given") is None


def _loss_at(value: Any) -> dict[int, float] | None:
    """bench's {"step": loss} as {step: loss} (steps as integers, losses that are numbers); None without it."""
    if not isinstance(value, dict | Mapping):
        return None
    out: dict[int, float] = {}
    for k, v in value.items():
        try:
            step = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[step] = float(v)
    return out


def resolution(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The printed resolution a result recorded per metric ({metric: quantum in stored units}; positive finite ones
    only): how finely a program's printed figures could tell two values apart (runner/analysis/resolution.py)."""
    given = _mapping(metrics.get("resolution"))
    return {str(k): float(v) for k, v in given.items()
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0}
