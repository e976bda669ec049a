"""Figures of merit a workload's pattern parser reads: the store's own metrics and their units, the figure
model, the arithmetic of items_per_step and the placeholders a template may hold (runner/backends/workloads/config.py
and runner/backends/workloads/parse_settings.py use them)."""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import Field, field_validator

from runner.domain.cells import Strict
from runner.record.metrics import HEADLINE, METRIC_ALIASES, METRICS

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

TIME_UNITS = {"s": 1.0, "sec": 1.0, "seconds": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0,
              "minutes": 60.0, "h": 3600.0, "hours": 3600.0}
# A throughput's unit: ITEMS/TIME, the items one of these words (one of them after a prefix: kimg/s is
# 1,000 img/s), the time one of RATE_TIMES. Anything else is refused with the reason, not taken as written.
ITEM_WORDS = ("img", "imgs", "image", "images", "sample", "samples", "tok", "toks", "token", "tokens", "seq", "seqs",
              "sequence", "sequences", "item", "items", "ex", "example", "examples", "frame", "frames", "word",
              "words", "char", "chars", "step", "steps", "it", "iter", "iters", "batch", "batches", "query", "queries",
              "pixel", "pixels", "patch", "patches")
PREFIXES = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9}
RATE_TIMES = {"s": 1.0, "sec": 1.0, "second": 1.0, "ms": 1e3, "min": 1 / 60.0, "h": 1 / 3600.0, "hour": 1 / 3600.0}
MEMORY_UNITS = {"B": 1.0, "bytes": 1.0, "KiB": 2.0**10, "MiB": 2.0**20, "GiB": 2.0**30, "KB": 1e3, "MB": 1e6,
                "GB": 1e9}


class Figure(Strict):
    """One figure of merit found by a regular expression (as ReFrame's performance variables and Ramble's
    figures of merit declare them): where its number is, its unit, and which direction is better."""

    regex: str = Field(min_length=1)
    unit: str = ""
    better: Literal["higher", "lower"] | None = None
    reduce: Literal["last", "first", "mean", "min", "max"] = "last"
    skip: int = Field(0, ge=0, description="leading matches discarded (warm-up)")
    optional: bool = False
    decimal: Literal[".", ","] = Field(".", description="the decimal mark the program writes; the other mark may only "
                                                        "group thousands")

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            regex = re.compile(value)
        except re.error as e:
            raise ValueError(f"{value!r} is not a regular expression: {e}") from None
        if regex.groups and "value" not in regex.groupindex and regex.groupindex and len(regex.groupindex) > 1:
            raise ValueError(f"{value!r} has several named groups; name the number's group `value`")
        return value


def store_metrics() -> dict[str, str]:
    """The store's own metrics a figure may be, by name, with the stored unit its figure converts to: the metric
    table's (runner/record/metrics.py `Metric.figure_unit`), which also says their direction. Anything else is a
    figure of the user's own naming."""
    return {m.name: m.figure_unit for m in METRICS.values() if m.figure_unit is not None}


def store_metric(name: str) -> str:
    """The store metric a figure's name (the metric's, or one of its aliases in the table) names; else the name as
    written (a figure of the user's own naming)."""
    metric = METRIC_ALIASES.get(name, name)
    return metric if metric in store_metrics() else name


def figure_config(name: str, fig: Figure) -> dict[str, Any]:
    """A figure as the launcher reads it: the store metric it is (its unit converted) or the user's own."""
    metric = store_metric(name)
    stored_units = store_metrics()
    out: dict[str, Any] = {"name": name, "regex": fig.regex, "unit": fig.unit, "reduce": fig.reduce,
                           "skip": fig.skip, "optional": fig.optional, "scale": 1.0, "metric": None,
                           "better": fig.better}
    if fig.decimal != ".":  # only when not the default: a configuration written before keeps its cell key
        out["decimal"] = fig.decimal
    if metric not in stored_units:
        if fig.better is None:
            raise ValueError(f"figure {name}: say which direction is better (better: higher or lower); a figure "
                             f"of your own naming has no known direction (the store's metrics: "
                             f"{', '.join(stored_units)})")
        return out
    stored = stored_units[metric]
    better = "higher" if METRICS[metric].higher_is_better else "lower"
    if fig.better is not None and fig.better != better:
        raise ValueError(f"figure {name}: {metric} is better when {better}; it cannot be declared better: {fig.better}")
    unit = fig.unit.strip()
    scale = 1.0
    shown = unit
    if metric == HEADLINE:
        scale, shown = rate_unit(name, fig.unit)
    if metric in ("window_s", "iter_time"):
        if unit not in TIME_UNITS:
            raise ValueError(f"figure {name}: unit {fig.unit!r}; allowed: {', '.join(TIME_UNITS)}")
        scale = TIME_UNITS[unit]
    elif metric == "peak_mem":
        if unit not in MEMORY_UNITS:
            raise ValueError(f"figure {name}: unit {fig.unit!r}; allowed: {', '.join(MEMORY_UNITS)}")
        scale = MEMORY_UNITS[unit]
    elif metric == "accuracy":
        if unit not in ("", "%", "fraction"):
            raise ValueError(f"figure {name}: unit {fig.unit!r}; allowed: '' or fraction (0..1), % (0..100)")
        scale = 0.01 if unit == "%" else 1.0
    elif metric == "images_per_joule" and not unit.endswith("/J"):
        raise ValueError(f"figure {name}: unit {fig.unit!r}; images per joule is a count per joule (img/J)")
    out.update(metric=metric, scale=scale, better=better, stored_unit=stored)
    if metric == HEADLINE and shown != unit:  # kimg/s shows img/s; the other metrics' units are fixed
        out["shown_unit"] = shown
    return out


def rate_unit(name: str, written: str) -> tuple[float, str]:
    """(scale to items per second, the unit shown) of a throughput's unit; a ValueError says why not."""
    unit = written.strip()
    items, _, per = unit.partition("/")
    if not items or per not in RATE_TIMES:
        raise ValueError(f"figure {name}: unit {written!r}; a throughput is a rate per second (img/s, samples/s, "
                         f"tokens/s; per {', '.join(RATE_TIMES)})")
    if items in ITEM_WORDS:
        return RATE_TIMES[per], f"{items}/s"
    if items[:1] in PREFIXES and items[1:] in ITEM_WORDS:
        return PREFIXES[items[0]] * RATE_TIMES[per], f"{items[1:]}/s"
    if items[:1] == "m" and items[1:] in ITEM_WORDS:
        why = f"m is milli (a thousandth of {items[1:]}); write M{items[1:]}/s for millions"
    elif items in TIME_UNITS:
        why = "a time per time is not a throughput"
    else:
        why = f"{items!r} is not a count this parser knows"
    raise ValueError(f"figure {name}: unit {written!r} is ambiguous: {why}; write ITEMS/s with ITEMS one of "
                     f"{', '.join(ITEM_WORDS)}, optionally after k, M or G (kimg/s is 1,000 img/s)")


ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Add, ast.Sub, ast.Mult, ast.Div,
              ast.FloorDiv, ast.USub, ast.UAdd)


def arithmetic(template: str, values: Mapping[str, str] | None) -> float:
    """items_per_step's value: its placeholders filled from the cell's values (1 when values is None, to
    check the form), then + - * / // of numbers and brackets, read by Python's parser and walked here (never
    eval: no names, calls, attributes or powers). A ValueError says what is wrong."""
    if len(template) > 200:
        raise ValueError("items_per_step: longer than 200 characters")
    names = placeholders(template)
    filled = template.format(**{n: "1" if values is None else str(values.get(n, "")) for n in names})
    try:
        tree = ast.parse(filled, mode="eval")
    except SyntaxError:
        raise ValueError(f"items_per_step: {filled!r} is not arithmetic of numbers (+ - * / // and brackets)") from None
    for node in ast.walk(tree):
        if not isinstance(node, ARITHMETIC) or (isinstance(node, ast.Constant) and (
                isinstance(node.value, bool) or not isinstance(node.value, int | float))):
            raise ValueError(f"items_per_step: {filled!r}: only numbers, + - * / // and brackets are allowed")
    try:
        value = float(_walk(tree.body))
    except (ZeroDivisionError, OverflowError) as e:
        raise ValueError(f"items_per_step: {filled!r}: {e}") from None
    if values is not None and not (value > 0 and value < float("inf")):
        raise ValueError(f"items_per_step: {filled!r} is {value:g}; a step processes a positive number of items")
    return value


def _walk(node: ast.AST) -> float:
    if isinstance(node, ast.Constant):
        return float(node.value)  # type: ignore[arg-type]  # checked: int or float
    if isinstance(node, ast.UnaryOp):
        return -_walk(node.operand) if isinstance(node.op, ast.USub) else _walk(node.operand)
    assert isinstance(node, ast.BinOp)
    a, b = _walk(node.left), _walk(node.right)
    ops = {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}
    if type(node.op) in ops:
        return ops[type(node.op)]
    return a / b if isinstance(node.op, ast.Div) else a // b


def placeholders(template: str) -> list[str]:
    """The names a template's placeholders use; a ValueError for a malformed one or one with a format spec,
    a conversion, an attribute or an index (values are inserted as text, as they are)."""
    names = []
    for _, field_name, spec, conversion in string.Formatter().parse(template):
        if field_name is None:
            continue
        if not NAME_RE.match(field_name):
            raise ValueError(f"{{{field_name}}} is not a placeholder; write {{NAME}} with an axis's name (or {{{{ }}}} "
                             "for a literal brace)")
        if spec or conversion:
            raise ValueError(f"{{{field_name}...}}: a placeholder takes no format or conversion; the value is "
                             "inserted as written")
        names.append(field_name)
    return names
