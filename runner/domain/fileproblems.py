"""A matrix file's mistakes as one line each: the file, the field path and its line, what is allowed."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from runner.domain.cellmatch import AXES
from runner.domain.cells import Mount, RunSettings


def format_errors(where: str, text: str, err: ValidationError, prefix: tuple[Any, ...],
            model: type[BaseModel], strip_index: bool = False) -> str:
    """Pydantic's errors as one line each, naming the file, the field path (with its line) and what is allowed."""
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        if strip_index and len(loc) >= 2 and isinstance(loc[1], int):
            loc = loc[:1] + loc[2:]  # an include value is one scalar, not a list
        full = prefix + loc
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            found = owner(model, loc[:-1])
            allowed = ", ".join(found.model_fields) if found else ""
            msg = f"unknown key {loc[-1]!r}" + (f"; allowed: {allowed}" if allowed else "")
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] == "literal_error":
            msg = f"{e['input']!r} is not allowed; allowed: {(e.get('ctx') or {}).get('expected', '')}"
        elif e["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")
        elif e["type"] == "string_type":
            given = e["input"]
            kind = "a list" if isinstance(given, list) else "a mapping" if isinstance(given, dict) else \
                type(given).__name__
            msg = f"expected text, not {kind}; write one value, in quotes if YAML would read it otherwise"
        lines.append(line(where, text, full) + f": {msg}")
    return "\n".join(lines)


def owner(model: type[BaseModel] | None, loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model that owns the field at loc, to list its allowed keys."""
    known: dict[str, type[BaseModel]] = {"axes": AXES.get(), "run": RunSettings, "mounts": Mount}
    current = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(str(part)) if current else None
        nested = [t for t in (field.annotation, *typing.get_args(field.annotation)) if isinstance(t, type)
                  and issubclass(t, BaseModel)] if field else []
        current = nested[0] if nested else known.get(str(part))  # a backend's own nested model, e.g. container
    return current


def line(where: str, text: str, loc: Sequence[Any]) -> str:
    """'file: a.b[2].c (line N)' for a field path, with the line from the YAML node tree."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    found = find_line(text, loc)
    return f"{where}: {path}" + (f" (line {found})" if found else "")


def find_line(text: str, loc: Sequence[Any]) -> int | None:
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
