"""`workload:` in matrix.yaml: a user's own program instead of bench, its files and the parser of its output.

A workload is a definition like an image or an environment variable: its argv template, its parser's
configuration and the content hashes of its files are part of each cell's key (`Workload.identity`), so
a changed script is a new definition and is never pooled with the old one.
"""

from __future__ import annotations

import ast
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from runner.spec import Strict, stable_hash
from runner.workloads.files import FileEntry, scan

PARSER_KINDS = ("mllog", "dllogger", "pattern", "matrix")
# Placeholders every workload may use besides the cell's axes; the launcher fills python and output in the
# environment, the backend says where files are.
BUILTIN_PLACEHOLDERS = ("python", "files", "output", "iterations", "warmup", "seed", "repeat")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The store's own metrics a figure may be (runner/analysis/frame.py): their direction is fixed, and a
# figure's unit converts to the stored one. Anything else is a figure of the user's own naming.
STORE_METRICS: dict[str, tuple[str, str]] = {  # name -> (better, stored unit)
    "throughput": ("higher", "per second"), "window_s": ("lower", "s"), "iter_time": ("lower", "s"),
    "peak_mem": ("lower", "bytes"), "loss_end": ("lower", ""), "accuracy": ("higher", "fraction"),
    "images_per_joule": ("higher", "per joule"),
}
METRIC_ALIASES = {"time": "window_s", "memory": "peak_mem", "loss": "loss_end", "energy": "images_per_joule"}
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


class ParserSpec(Strict):
    """How the program's output becomes a result (docs/workloads.md)."""

    kind: Literal["mllog", "dllogger", "pattern", "matrix"]
    file: str | None = Field(None, description="a log file the program writes, e.g. {output}/dllogger.json")
    skip: int | None = Field(None, ge=0, description="mllog, dllogger: leading throughput records of warm-up")
    throughput_key: str | None = None
    keys: dict[str, str] = {}
    accuracy_percent: bool = False
    figures: dict[str, Figure] = {}
    require: list[str] | None = None
    items_per_step: str | int | None = Field(None, description="pattern: the items one step processes, from the "
                                                               "cell's axes, e.g. '{batch_size} * {block_size}'")
    items: str | None = Field(None, description="pattern: what items_per_step counts (tokens, images, samples)")

    @model_validator(mode="before")
    @classmethod
    def _word(cls, data: Any) -> Any:
        """`parser: mllog` is `parser: {kind: mllog}`."""
        return {"kind": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _fits_kind(self) -> ParserSpec:
        own = {"mllog": {"skip", "throughput_key", "require"}, "dllogger": {"skip", "keys", "accuracy_percent", "require"},
               "pattern": {"figures", "items_per_step", "items"}, "matrix": set()}[self.kind]
        stray = sorted(n for n in self.model_fields_set - {"kind", "file"} if n not in own)
        if stray:
            raise ValueError(f"{', '.join(stray)} is not a setting of the {self.kind} parser; its settings: "
                             f"{', '.join(['file', *sorted(own)]) if own else 'file'}")
        if self.kind == "pattern" and not self.figures:
            raise ValueError("the pattern parser needs figures: {NAME: {regex: ..., unit: ...}}")
        if self.kind == "matrix" and self.file:
            raise ValueError("the matrix parser reads the result line on the program's output, not a file")
        for name in self.figures:
            if not NAME_RE.match(name):
                raise ValueError(f"figure name {name!r}: letters, digits and _ only")
        if self.items_per_step is not None:
            metrics = {METRIC_ALIASES.get(n, n) for n in self.figures}
            if "iter_time" not in metrics or "throughput" in metrics:
                raise ValueError("items_per_step turns the time of a step (a figure named iter_time) into a "
                                 "throughput; give an iter_time figure and no throughput figure")
            if self.items is not None and self.items not in ITEM_WORDS:
                raise ValueError(f"items: {self.items!r}; one of {', '.join(ITEM_WORDS)}")
            arithmetic(str(self.items_per_step), None)
        for name in [*(self.require or ()), *self.keys]:
            if METRIC_ALIASES.get(name, name) not in ("throughput", "window_s", "accuracy", "loss_end"):
                raise ValueError(f"{name!r} is not a metric this parser reads; allowed: throughput, window_s, "
                                 "accuracy, loss_end")
        return self


class WorkloadSpec(Strict):
    name: str | None = None
    argv: list[str] = Field(min_length=1)
    files: list[str] = []
    parser: ParserSpec

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\0" in a for a in value):
            raise ValueError("an argument cannot hold a NUL character")
        return value


def figure_config(name: str, fig: Figure) -> dict[str, Any]:
    """A figure as the launcher reads it: the store metric it is (its unit converted) or the user's own."""
    metric = METRIC_ALIASES.get(name, name)
    out: dict[str, Any] = {"name": name, "regex": fig.regex, "unit": fig.unit, "reduce": fig.reduce,
                           "skip": fig.skip, "optional": fig.optional, "scale": 1.0, "metric": None,
                           "better": fig.better}
    if fig.decimal != ".":  # only when not the default: a configuration written before keeps its cell key
        out["decimal"] = fig.decimal
    if metric not in STORE_METRICS:
        if fig.better is None:
            raise ValueError(f"figure {name}: say which direction is better (better: higher or lower); a figure "
                             f"of your own naming has no known direction (the store's metrics: "
                             f"{', '.join(STORE_METRICS)})")
        return out
    better, stored = STORE_METRICS[metric]
    if fig.better is not None and fig.better != better:
        raise ValueError(f"figure {name}: {metric} is better when {better}; it cannot be declared better: {fig.better}")
    unit = fig.unit.strip()
    scale = 1.0
    shown = {"window_s": "s", "iter_time": "ms", "peak_mem": "MiB", "accuracy": "", "loss_end": ""}.get(metric, unit)
    if metric == "throughput":
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
    if metric == "throughput" and shown != unit:  # kimg/s shows img/s; the other metrics' units are fixed
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


def parser_config(p: ParserSpec) -> dict[str, Any]:
    """The parser's configuration as the launcher reads it (runner/bench/parsers.py): normalised, so two
    spellings of the same configuration are the same definition."""
    out: dict[str, Any] = {"kind": p.kind, "file": p.file}
    if p.kind in ("mllog", "dllogger"):
        out["skip"] = 1 if p.skip is None else p.skip
        out["require"] = sorted({METRIC_ALIASES.get(r, r) for r in (p.require if p.require is not None else ["throughput"])})
    if p.kind == "mllog":
        out["throughput_key"] = p.throughput_key or "throughput"
    if p.kind == "dllogger":
        out["keys"] = {METRIC_ALIASES.get(k, k): v for k, v in sorted(p.keys.items())}
        out["accuracy_percent"] = p.accuracy_percent
    if p.kind == "pattern":
        out["figures"] = [figure_config(name, fig) for name, fig in p.figures.items()]
        if p.items_per_step is not None:
            out["items_per_step_text"] = str(p.items_per_step)
            out["items"] = p.items or "items"
        metrics = [f["metric"] or f["name"] for f in out["figures"]]
        twice = sorted({m for m in metrics if metrics.count(m) > 1})
        if twice:
            raise ValueError(f"figures: {', '.join(twice)} is given by two figures")
    return out


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


def text(value: Any) -> str:
    """An axis value as the program receives it: booleans as YAML writes them, numbers as Python does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Workload:
    """One environment's effective workload, its files scanned (content hashes) when the matrix was read."""

    name: str | None
    argv: tuple[str, ...]
    files: tuple[FileEntry, ...]
    parser: Mapping[str, Any]

    def identity(self) -> dict[str, Any]:
        """What makes two workloads the same definition: argv template, parser, file contents."""
        return {"argv": list(self.argv), "parser": dict(self.parser),
                "files": {f.name: f.digest for f in self.files}}

    @property
    def digest(self) -> str:
        return stable_hash(self.identity())

    @property
    def files_digest(self) -> str:
        return stable_hash({f.name: f.digest for f in self.files})

    def uses(self) -> set[str]:
        names = {n for t in self.argv for n in placeholders(t)}
        if self.parser.get("file"):
            names |= set(placeholders(str(self.parser["file"])))
        if self.parser.get("items_per_step_text"):
            names |= set(placeholders(str(self.parser["items_per_step_text"])))
        return names

    def cell_problem(self, values: Mapping[str, Any]) -> str | None:
        """Why this workload cannot run with a cell's values (items_per_step of a word), or None."""
        template = self.parser.get("items_per_step_text")
        if template is None:
            return None
        try:
            arithmetic(str(template), {k: text(v) for k, v in values.items()})
        except ValueError as e:
            return str(e)
        return None


def merged(top: Any, own: Any) -> Any:
    """An environment's workload: its own keys over the matrix's (`argv` alone, say, for an image where the
    script lives elsewhere)."""
    if own is None:
        return top
    if isinstance(top, Mapping) and isinstance(own, Mapping):
        return {**top, **own}
    return own


def resolve(raw: Any, base: Path, axis_names: Sequence[str]) -> tuple[Workload | None, list[tuple[tuple[Any, ...], str]]]:
    """(the workload, []) or (None, [(field path inside `workload`, why), ...])."""
    try:
        spec = WorkloadSpec.model_validate(raw)
    except ValidationError as e:
        found: list[tuple[tuple[Any, ...], str]] = []
        for err in e.errors():
            loc = tuple(err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                owner: type[Strict] = (Figure if len(loc) >= 3 and loc[-3] == "figures" else
                                       ParserSpec if loc[:1] == ("parser",) else WorkloadSpec)
                msg = f"unknown key {loc[-1]!r}; allowed: {', '.join(owner.model_fields)}"
            elif err["type"] == "missing":
                msg = "required field is missing"
            elif err["type"] == "dict_type" and loc[-1:] == ("figures",):
                msg = "a mapping of figure names to {regex: ..., unit: ...}, e.g. figures: {throughput: {regex: ...}}"
            elif err["type"] == "literal_error":
                msg = f"{err['input']!r} is not allowed; allowed: {(err.get('ctx') or {}).get('expected', '')}"
            found.append((loc, msg))
        return None, found
    problems: list[tuple[tuple[Any, ...], str]] = []
    try:
        config = parser_config(spec.parser)
    except ValueError as e:
        return None, [(("parser",), str(e))]
    allowed = set(axis_names) | set(BUILTIN_PLACEHOLDERS)
    where: list[tuple[tuple[Any, ...], str]] = [(("argv", i), t) for i, t in enumerate(spec.argv)]
    if spec.parser.file:
        where.append((("parser", "file"), spec.parser.file))
    if spec.parser.items_per_step is not None:
        where.append((("parser", "items_per_step"), str(spec.parser.items_per_step)))
    for loc, template in where:
        try:
            names = placeholders(template)
        except ValueError as e:
            problems.append((loc, str(e)))
            continue
        for name in names:
            if name not in allowed:
                problems.append((loc, f"{{{name}}} is not an axis of this matrix or a placeholder matrix fills; "
                                      f"allowed: {', '.join(sorted(allowed))}"))
            elif name == "files" and not spec.files:
                problems.append((loc, "{files} names the folder of the workload's files, but it has no `files:`"))
    entries: list[FileEntry] = []
    for i, name in enumerate(spec.files):
        try:
            entries.append(scan(name, base))
        except ValueError as e:
            problems.append((("files", i), str(e)))
    names = [e.name for e in entries]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append((("files",), f"two entries are placed as {dup!r} (files land under their own name)"))
    if problems:
        return None, problems
    return Workload(spec.name, tuple(spec.argv), tuple(entries), config), []
