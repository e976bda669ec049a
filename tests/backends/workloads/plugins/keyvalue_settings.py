"""The controller's side of the `keyvalue` workload parser (parser_keyvalue.py beside it is the launcher's):
its settings model, which owns its schema and says what the launcher reads. In the project it would be
runner/backends/workloads/parser_keyvalue.py, imported when a matrix names the kind."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from runner.backends.workloads.parse_settings import ParserSettings, register

METRICS = ("throughput", "loss_end", "accuracy", "window_s")


@register
class KeyvalueSettings(ParserSettings):
    """Lines `name=value`; `metrics`: the store metrics they give, each required."""

    kind: Literal["keyvalue"]
    metrics: list[str] = Field(["throughput"], min_length=1)
    unit: str = Field("items/s", description="the unit of the throughput the program prints")

    @field_validator("metrics")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        for name in value:
            if name not in METRICS:
                raise ValueError(f"{name!r} is not a metric keyvalue gives; allowed: {', '.join(METRICS)}")
        return value

    def config(self) -> dict[str, Any]:
        return {**super().config(), "metrics": sorted(set(self.metrics)), "unit": self.unit}
