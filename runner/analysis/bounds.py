"""A reference's bound on one metric of matched cells (`references:` in matrix.yaml; runner/analysis/references.py):
at least, at most, or a value within a tolerance, in the metric's display unit, and the short way to write one."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, field_validator, model_validator

from runner.domain.cells import Strict, percentage


class Bound(Strict):
    """One expectation: at least `min`, at most `max`, or `value` within ±`tolerance`."""

    min: float | None = None
    max: float | None = None
    value: float | None = None
    tolerance: float | str | None = None

    @field_validator("tolerance", mode="before")
    @classmethod
    def _tolerance(cls, v: Any) -> Any:
        # '5%' is relative; a plain number is absolute, in the metric's display unit. Checked here, when the
        # file is read: a tolerance that cannot be used must not wait for the end of a measured run.
        if isinstance(v, str):
            text = v.strip()
            try:
                number = float(text[:-1]) if text.endswith("%") else math.nan
            except ValueError:
                number = math.nan
            if not text.endswith("%") or not math.isfinite(number):
                raise ValueError(f"tolerance {v!r}: write a percentage such as 5% or a number in the metric's unit")
            if number < 0:
                raise ValueError(f"tolerance {v!r}: a tolerance is a distance, 0 or more (5% means ± 5%)")
            return text
        if isinstance(v, bool):
            raise ValueError(f"tolerance {v!r}: write a percentage such as 5% or a number in the metric's unit")
        if isinstance(v, int | float) and (not math.isfinite(v) or v < 0):
            raise ValueError(f"tolerance {v!r}: a tolerance is a finite distance, 0 or more")
        return v

    @field_validator("min", "max", "value", mode="before")
    @classmethod
    def _finite(cls, v: Any) -> Any:
        if isinstance(v, bool):
            raise ValueError(f"{v!r} is not a number")
        if isinstance(v, int | float) and not math.isfinite(v):
            raise ValueError(f"{v!r}: a reference is a finite number")
        return v

    @model_validator(mode="after")
    def _one_kind(self) -> Bound:
        if self.value is None and self.tolerance is not None:
            raise ValueError("tolerance needs a value: {value: 2790, tolerance: 5%}")
        if self.value is not None and (self.min is not None or self.max is not None):
            raise ValueError("give either value (± tolerance) or min/max, not both")
        if self.value is None and self.min is None and self.max is None:
            raise ValueError("give min, max, or value with tolerance")
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max:g}) is below min ({self.min:g})")
        return self

    @property
    def tol_abs(self) -> float:
        """The tolerance in the metric's unit (0 without one: the value must match exactly)."""
        if self.tolerance is None or self.value is None:
            return 0.0
        if isinstance(self.tolerance, str):
            return abs(self.value) * float(percentage(self.tolerance))
        return abs(float(self.tolerance))

    @property
    def low(self) -> float:
        if self.value is not None:
            return self.value - self.tol_abs
        return self.min if self.min is not None else -math.inf

    @property
    def high(self) -> float:
        if self.value is not None:
            return self.value + self.tol_abs
        return self.max if self.max is not None else math.inf

    def text(self) -> str:
        if self.value is not None:
            tol = self.tolerance if isinstance(self.tolerance, str) else f"{self.tol_abs:g}"
            return f"{self.value:g} ± {tol}"
        parts = ([f">= {self.min:g}"] if self.min is not None else []) + (
            [f"<= {self.max:g}"] if self.max is not None else [])
        return " and ".join(parts)

    def margin(self, measured: float) -> float:
        """How far inside (+) or outside (-) the bound `measured` is, relative to the reference value."""
        if self.value is not None:
            scale = abs(self.value) or 1.0
            return (self.tol_abs - abs(measured - self.value)) / scale
        margins = []
        if self.min is not None:
            margins.append((measured - self.min) / (abs(self.min) or 1.0))
        if self.max is not None:
            margins.append((self.max - measured) / (abs(self.max) or 1.0))
        return min(margins)


_SHORT = re.compile(r"^\s*(?:(?P<op>>=|<=|≥|≤)\s*(?P<bound>[-+0-9.eE]+)"
                    r"|(?P<value>[-+0-9.eE]+)\s*(?:±|\+-|\+/-)\s*(?P<tol>[0-9.eE]+%?))\s*$")


def parse_bound(raw: Any) -> Bound:
    """A Bound from a mapping or a short string (a bare number is refused: at least, at most, or about?): '>= 3000', '<= 2048', '2790 ± 5%'."""
    if isinstance(raw, Mapping):
        return Bound.model_validate(raw)
    if isinstance(raw, str):
        m = _SHORT.match(raw)
        if not m:
            raise ValueError(f"{raw!r} is not a reference; write '>= 3000', '<= 2048', '2790 ± 5%' "
                             "or a mapping {min, max, value, tolerance}")
        try:
            if m["op"]:
                key = "min" if m["op"] in (">=", "≥") else "max"
                return Bound(**{key: float(m["bound"])})
            tol: float | str = m["tol"] if m["tol"].endswith("%") else float(m["tol"])
            return Bound(value=float(m["value"]), tolerance=tol)
        except ValidationError as e:
            why = "; ".join(str(err["msg"]).removeprefix("Value error, ") for err in e.errors())
            raise ValueError(f"{raw!r} is not a reference ({why})") from None
        except ValueError as e:
            raise ValueError(f"{raw!r} is not a reference ({e})") from None
    raise ValueError(f"{raw!r} is not a reference; write '>= 3000', '<= 2048', '2790 ± 5%' "
                     "or a mapping {min, max, value, tolerance}")
