"""`parser:` of a workload: one settings model per parser kind, each owning its schema, gathered in one
registry and read as a discriminated union on `kind` (docs/internals.md, "How to add a workload parser").

A kind's settings model subclasses `ParserSettings` with `kind: Literal["NAME"]` and its own fields, says in
`config()` what the launcher's parser of that kind (runner/bench/parsers.py) reads, and is registered with
`@register`: here for the built-in kinds, or in its own module `runner/backends/workloads/parser_NAME.py`, imported
when a matrix names the kind. Nothing else spells a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from runner.backends.workloads.figures import (
    ITEM_WORDS,
    NAME_RE,
    Figure,
    arithmetic,
    figure_config,
    store_metric,
)
from runner.base.registry import Registry
from runner.domain.cells import Strict
from runner.record.metrics import HEADLINE

Loc = tuple[Any, ...]
# The store metrics mllog and dllogger read (`require:`, dllogger's `keys:`).
READ_METRICS = (HEADLINE, "window_s", "accuracy", "loss_end")
HERE = "runner/backends/workloads/parse_settings.py"


class ParserSettings(Strict):
    """What every parser's settings hold: its kind and, optionally, a log file the program writes."""

    kind: str
    file: str | None = Field(None, description="a log file the program writes, e.g. {output}/dllogger.json")
    # Settings that may hold placeholders, checked against the cell's axes like argv.
    template_fields: ClassVar[tuple[str, ...]] = ("file",)

    @model_validator(mode="before")
    @classmethod
    def _own_settings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            stray = sorted(str(k) for k in data if k not in cls.model_fields)
            if stray:
                own = sorted(n for n in cls.model_fields if n not in ("kind", "file"))
                raise ValueError(f"{', '.join(stray)} {'is not a setting' if len(stray) == 1 else 'are not settings'} of "
                                 f"the {data.get('kind')} parser; its "
                                 f"settings: {', '.join(['file', *own])}")
        return data

    def config(self) -> dict[str, Any]:
        """The configuration the launcher reads (runner/bench/parsers.py): normalised, so two spellings of the
        same settings are the same definition (it is part of each cell's key). A ValueError says what is wrong."""
        return {"kind": self.kind, "file": self.file}

    def templates(self) -> list[tuple[str, str]]:
        """(field, text) of each setting given that may hold placeholders."""
        return [(name, str(getattr(self, name))) for name in self.template_fields if getattr(self, name) is not None]


def _own_modules() -> dict[str, str]:
    """Kinds in their own module, runner/backends/workloads/parser_NAME.py, imported when asked for."""
    return {p.stem.removeprefix("parser_"): f"runner.backends.workloads.{p.stem}"
            for p in sorted(Path(__file__).parent.glob("parser_*.py"))}


PARSERS: Registry[type[ParserSettings]] = Registry("workload parser", _own_modules())
P = TypeVar("P", bound=ParserSettings)


def register(model: type[P]) -> type[P]:
    """Register a settings model under the kind its `kind: Literal["NAME"]` names."""
    kinds = get_args(model.__pydantic_fields__["kind"].annotation)
    if len(kinds) != 1 or not isinstance(kinds[0], str) or not NAME_RE.match(kinds[0]):
        raise TypeError(f"{model.__qualname__}: declare its kind as kind: Literal['NAME'] (letters, digits, _)")
    PARSERS.register(kinds[0], model, rename="kind")
    return model


def _read_metrics(names: list[str]) -> None:
    for name in names:
        if store_metric(name) not in READ_METRICS:
            raise ValueError(f"{name!r} is not a metric this parser reads; allowed: {', '.join(READ_METRICS)}")


def _required(names: list[str] | None) -> list[str]:
    return sorted({store_metric(r) for r in (names if names is not None else [HEADLINE])})


@register
class MllogSettings(ParserSettings):
    """MLPerf logging lines `:::MLLOG {json}`."""

    kind: Literal["mllog"]
    skip: int | None = Field(None, ge=0, description="leading tracked_stats throughput records of warm-up")
    throughput_key: str | None = None
    require: list[str] | None = None

    @model_validator(mode="after")
    def _metrics(self) -> MllogSettings:
        _read_metrics(self.require or [])
        return self

    def config(self) -> dict[str, Any]:
        return {**super().config(), "skip": 1 if self.skip is None else self.skip, "require": _required(self.require),
                "throughput_key": self.throughput_key or "throughput"}


@register
class DlloggerSettings(ParserSettings):
    """DLLogger JSON lines `DLLL {json}` (NVIDIA DeepLearningExamples)."""

    kind: Literal["dllogger"]
    skip: int | None = Field(None, ge=0, description="leading per-step throughput records of warm-up")
    keys: dict[str, str] = {}
    accuracy_percent: bool = False
    require: list[str] | None = None

    @model_validator(mode="after")
    def _metrics(self) -> DlloggerSettings:
        _read_metrics([*(self.require or ()), *self.keys])
        return self

    def config(self) -> dict[str, Any]:
        return {**super().config(), "skip": 1 if self.skip is None else self.skip, "require": _required(self.require),
                "keys": {store_metric(k): v for k, v in sorted(self.keys.items())},
                "accuracy_percent": self.accuracy_percent}


@register
class PatternSettings(ParserSettings):
    """Named figures by regular expression, each with a unit, a scale and a direction."""

    kind: Literal["pattern"]
    figures: dict[str, Figure] = {}
    items_per_step: str | int | None = Field(None, description="the items one step processes, from the cell's "
                                                               "axes, e.g. '{batch_size} * {block_size}'")
    items: str | None = Field(None, description="what items_per_step counts (tokens, images, samples)")
    template_fields: ClassVar[tuple[str, ...]] = ("file", "items_per_step")

    @model_validator(mode="after")
    def _figures(self) -> PatternSettings:
        if not self.figures:
            raise ValueError("the pattern parser needs figures: {NAME: {regex: ..., unit: ...}}")
        for name in self.figures:
            if not NAME_RE.match(name):
                raise ValueError(f"figure name {name!r}: letters, digits and _ only")
        if self.items_per_step is not None:
            metrics = {store_metric(n) for n in self.figures}
            if "iter_time" not in metrics or HEADLINE in metrics:
                raise ValueError("items_per_step turns the time of a step (a figure named iter_time) into a "
                                 "throughput; give an iter_time figure and no throughput figure")
            if self.items is not None and self.items not in ITEM_WORDS:
                raise ValueError(f"items: {self.items!r}; one of {', '.join(ITEM_WORDS)}")
            arithmetic(str(self.items_per_step), None)
        return self

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {**super().config(),
                               "figures": [figure_config(name, fig) for name, fig in self.figures.items()]}
        if self.items_per_step is not None:
            out["items_per_step_text"] = str(self.items_per_step)
            out["items"] = self.items or "items"
        metrics = [f["metric"] or f["name"] for f in out["figures"]]
        twice = sorted({m for m in metrics if metrics.count(m) > 1})
        if twice:
            raise ValueError(f"figures: {', '.join(twice)} is given by two figures")
        return out


@register
class MatrixSettings(ParserSettings):
    """The `MATRIX_RESULT` line a script prints through matrix_bench.measure."""

    kind: Literal["matrix"]

    @model_validator(mode="after")
    def _no_file(self) -> MatrixSettings:
        if self.file:
            raise ValueError("the matrix parser reads the result line on the program's output, not a file")
        return self


@cache
def _union(models: tuple[type[ParserSettings], ...]) -> TypeAdapter[ParserSettings]:
    one: Any = Union[models] if len(models) > 1 else models[0]  # noqa: UP007  # built from the registry
    return TypeAdapter(Annotated[one, Field(discriminator="kind")])


def message(err: Any, owner: Callable[[Loc], type[Strict]]) -> str:
    """One pydantic error as a line; `owner(loc)`: the model whose keys an unknown key is checked against."""
    loc = tuple(err["loc"])
    if err["type"] == "extra_forbidden":
        return f"unknown key {loc[-1]!r}; allowed: {', '.join(owner(loc).model_fields)}"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "dict_type" and loc[-1:] == ("figures",):
        return "a mapping of figure names to {regex: ..., unit: ...}, e.g. figures: {throughput: {regex: ...}}"
    if err["type"] == "literal_error":
        return f"{err['input']!r} is not allowed; allowed: {(err.get('ctx') or {}).get('expected', '')}"
    return str(err["msg"]).removeprefix("Value error, ")


def validate(raw: Any) -> tuple[ParserSettings | None, list[tuple[Loc, str]]]:
    """(the settings of the kind `raw` names, []) or (None, [(field path inside `parser`, why), ...]).
    `parser: mllog` is `parser: {kind: mllog}`."""
    data = {"kind": raw} if isinstance(raw, str) else raw
    if not isinstance(data, dict):
        return None, [((), f"a parser kind ({', '.join(PARSERS.names())}) or a mapping {{kind: ..., ...}}")]
    kind = data.get("kind")
    if kind is None:
        return None, [(("kind",), "required field is missing")]
    if not isinstance(kind, str) or kind not in PARSERS:
        return None, [(("kind",), f"{str(kind)[:80]!r} is not allowed; allowed: {', '.join(PARSERS.names())} "
                                  f"(the workload parsers {HERE} registers)")]
    adapter = _union(tuple(PARSERS.get(name) for name in PARSERS.names()))
    try:
        return adapter.validate_python(data), []
    except ValidationError as e:
        found = []
        for err in e.errors():
            loc = tuple(err["loc"])
            err["loc"] = loc[1:] if loc[:1] == (kind,) else loc
            found.append((err["loc"], message(err, lambda at: Figure if len(at) >= 3 and at[-3] == "figures"
                                              else PARSERS.get(kind))))
        return None, found


class ParserSpec:
    """`parser:` read into the settings model of its kind; `model_validate` raises a ValueError naming the
    field and what is wrong."""

    @staticmethod
    def model_validate(raw: Any) -> ParserSettings:
        settings, problems = validate(raw)
        if settings is None:
            raise ValueError("; ".join(f"{'.'.join(map(str, ('parser', *loc)))}: {why}" for loc, why in problems))
        return settings


def parser_config(settings: ParserSettings) -> dict[str, Any]:
    """The parser's configuration as the launcher reads it (runner/bench/parsers.py)."""
    return settings.config()
