"""A stored repeat as a typed record (as pyperf's `Run`): its identity, how it ended, and its figures with their
definitions, built once from a store row instead of reading the row's dict by string everywhere. The long frame
(runner/analysis/frame.py) is the same data for whole stores; this is for code that walks a few repeats."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runner.analysis.admission import Check
from runner.analysis.comparable import definition_text
from runner.analysis.frame import definitions, frame, measured
from runner.spec.outcomes import Status


@dataclass(frozen=True)
class Repeat:
    """One stored repeat: the newest row of (cell key, repeat number)."""

    id: int
    run_id: str
    cell_key: str
    number: int
    environment: str
    status: str           # as admission sees it (runner/analysis/admission.py): a stored ok may be diverged or refused
    reason: str = ""
    row: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    stored_status: str = ""
    checks: tuple[Check, ...] = field(default=(), compare=False)
    _figures: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Repeat:
        """Built once where the row is read: its frame record (figures, admission) computed here."""
        rec = frame([row]).iloc[0].to_dict()
        return cls(int(row.get("id") or 0), str(row.get("run_id") or ""), str(row.get("cell_key") or ""),
                   int(row.get("repeat") or 0), str(row.get("environment") or ""), str(rec["status"]),
                   str(rec["reason"] or ""), row, str(rec["stored_status"]), tuple(rec["checks"] or ()), rec)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK.value

    @property
    def final(self) -> bool:
        """Measured, as resume counts it (an unknown status is not)."""
        try:
            return Status(self.status).final
        except ValueError:
            return False

    def value(self, metric: str) -> float | None:
        """The metric as the frame computes it (stored units); None when not measured or not finite."""
        v = self._figures.get(metric) if self._figures else frame([self.row])[metric].iloc[0]
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    @property
    def resolution(self) -> Mapping[str, float]:
        """The printed resolution its result recorded per metric (runner/analysis/resolution.py)."""
        got = self._figures.get("resolution") if self._figures else None
        return got if isinstance(got, Mapping) else {}

    @property
    def printed(self) -> bool:
        """Its figures were read from a program's printed output (a workload)."""
        return bool(self._figures.get("printed")) if self._figures else False

    @property
    def steps(self) -> int | None:
        """Training steps before its loss (warm-up included), when recorded."""
        steps = measured(self.row)["steps"]
        return steps if isinstance(steps, int) else None

    @property
    def loss_at(self) -> Mapping[int, float] | None:
        return measured(self.row)["loss_at"]

    def definition(self, metric: str) -> str:
        """How this repeat obtained the metric, in the words comparability compares ('how [unit]')."""
        d = definitions(self.row.get("metrics") or {})
        return definition_text(d[f"how_{metric}"], d[f"unit_{metric}"])
