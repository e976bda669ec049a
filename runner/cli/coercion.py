"""Option values coerced without pydantic where Typer's own rule is plain: a string, a flag, a path, a list of them.

Typer (0.29 on) coerces every option's value through a pydantic TypeAdapter that it builds the first time the
option is read, so `matrix ls` imported pydantic (about 0.12 s on the 2-vCPU VM, a quarter of the command) to
turn a string into a string. `install()` puts a plain coercion in front of Typer's for the annotations whose
rule is Typer's own code (typer/_adapters.py):

- `str`: `str(value)` (`None` and bytes go to Typer's adapter);
- `bool`: a flag's value, already a bool;
- `pathlib.Path` (no `path_type`): `Path(value)`, then Typer's own `coerce_cli_path` for its checks (exists,
  readable, resolve_path ...), which needs no pydantic once the value is a Path;
- `list[...]` of those, item by item.

Any other annotation (numbers, choices, dates, a parser) and any value the plain rule is not sure of goes to
Typer's adapter, built then: so a value coerces exactly as Typer would (tests/cli/test_coercion.py compares both
on every option of every command). Where Typer's private names differ (another version), nothing is changed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args, get_origin

PLAIN = (str, bool, Path)


def plain_annotation(annotation: Any) -> bool:
    """Whether `annotation` is one the plain coercion knows: str, bool, Path or a list of one of them."""
    if get_origin(annotation) is list:
        args = get_args(annotation)
        return len(args) == 1 and args[0] in PLAIN
    return annotation in PLAIN


class _Unsure(Exception):
    """The plain rule does not decide this value: Typer's adapter does."""


def _one(annotation: Any, info: Any, value: Any, param: Any, ctx: Any) -> Any:
    if annotation is str:
        if value is None or isinstance(value, bytes):  # bytes never come from Python's argv: Typer decodes them
            raise _Unsure
        return str(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise _Unsure
    if annotation is Path:
        # A str subclass (an Enum's member) or a NUL byte: pydantic's own reading decides.
        if getattr(info, "path_type", None) is not None or type(value) not in (str, Path) or "\0" in str(value):
            raise _Unsure
        from typer._param_types import coerce_cli_path

        return coerce_cli_path(value if isinstance(value, Path) else Path(value), info, path_type=Path,
                               param=param, ctx=ctx)
    raise _Unsure


def install() -> bool:
    """Put the plain coercion in front of Typer's; False (and nothing changed) where Typer's names differ."""
    try:
        from typer import _coercion, core

        base = _coercion.RuntimeParam
        build = _coercion.build_runtime_param
        parameter = core._TyperParameter
        original = parameter.get_runtime_param
    except (ImportError, AttributeError):
        return False
    if getattr(original, "plain", False):
        return True

    class PlainRuntimeParam(base):  # type: ignore[misc, valid-type]
        """Typer's RuntimeParam with the plain rule first; Typer's adapter for what it does not decide."""

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation, info = self.annotation, self.parameter_info
            try:
                if get_origin(annotation) is list:
                    items = value if isinstance(value, (list, tuple)) else [value]
                    return [_one(get_args(annotation)[0], info, item, param, ctx) for item in items]
                return _one(annotation, info, value, param, ctx)
            except _Unsure:
                return build(param.type_descriptor)._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            descriptor = self.type_descriptor
            if descriptor.file_annotation is None and plain_annotation(descriptor.annotation) \
                    and getattr(descriptor.parameter_info, "parser", None) is None:
                self._runtime_param = PlainRuntimeParam(parameter_info=descriptor.parameter_info,
                                                        annotation=descriptor.annotation)
        return original(self)

    get_runtime_param.plain = True  # type: ignore[attr-defined]
    parameter.get_runtime_param = get_runtime_param  # type: ignore[method-assign]
    return True
