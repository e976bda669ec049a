"""A stored repeat as admission sees it: a view of the record (runner/record/stored.py), with the status the decision
core uses, admission's checks and words, and its figures with their definitions, all derived from the stored repeat
and its admission, nothing kept beside them. The long frame (runner/analysis/frame.py) is the other shape, for whole
stores; this is for code that walks a few repeats (the kit's page, `matrix show` and `ls`, adaptive rounds, bisect's
measuring, the printer)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.domain.outcomes import Status
from runner.record.admission import AdmissionCheck
from runner.record.measurement import measured
from runner.record.measurement import resolution as resolution_of
from runner.record.metrics import METRICS, definition_text, definitions
from runner.record.readers import ran_program
from runner.record.stored import StoredRepeat, document


@dataclass(frozen=True)
class Repeat:
    """One stored repeat (the newest row of its cell key and repeat number, or any row a caller walks) and what
    admission decided for it."""

    stored: StoredRepeat

    @classmethod
    def of(cls, stored: StoredRepeat) -> Repeat:
        return cls(stored)

    @property
    def status(self) -> str:
        """As admission sees it (runner/record/admission.py): a stored ok may be diverged or refused."""
        return self.stored.admission.status

    @property
    def reason(self) -> str:
        verdict = self.stored.admission
        return (verdict.reasons or self.stored.reason) if verdict.changed else self.stored.reason

    @property
    def stored_status(self) -> str:
        return self.stored.status

    @property
    def admission(self) -> str:
        """The failed checks in words, or for an admitted repeat what deserves a word."""
        verdict = self.stored.admission
        return verdict.notes if verdict.admitted else verdict.reasons

    @property
    def checks(self) -> tuple[AdmissionCheck, ...]:
        return self.stored.admission.checks

    @property
    def id(self) -> int:
        return self.stored.id

    @property
    def run_id(self) -> str:
        return self.stored.run_id

    @property
    def cell_key(self) -> str:
        return self.stored.cell_key

    @property
    def number(self) -> int:
        return self.stored.repeat

    @property
    def environment(self) -> str:
        return self.stored.environment

    @property
    def params(self) -> Mapping[str, Any]:
        return self.stored.params

    @property
    def env(self) -> Mapping[str, Any]:
        return self.stored.env

    @property
    def raw(self) -> Mapping[str, Any] | None:
        return self.stored.raw

    @property
    def wall_s(self) -> float | None:
        """Seconds from its start to its end as stored (None when either is not recorded)."""
        s = self.stored
        return s.finished_at - s.started_at if s.started_at and s.finished_at else None

    @property
    def metrics(self) -> Mapping[str, Any]:
        """The result's metrics as admission admits them: a figure it left out on its own (an MFU above 1) is not
        read from them either (its raw fields are None here; the store keeps them)."""
        left_out = [k for name in self.stored.admission.dropped if name in METRICS for k in METRICS[name].raw_fields]
        if not left_out:
            return self.stored.metrics
        return document({**self.stored.metrics, **dict.fromkeys(left_out)})

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
        """The metric as the frame reads it (stored units); None when not measured, not finite or left out."""
        if metric in self.stored.admission.dropped:
            return None  # left out on its own by admission (outside what a machine can reach)
        v = self.stored.figures.get(metric)
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    @property
    def resolution(self) -> Mapping[str, float]:
        """The printed resolution its result recorded per metric (runner/analysis/resolution.py)."""
        return resolution_of(self.stored.metrics)

    @property
    def printed(self) -> bool:
        """Its figures were read from a program's printed output (a workload)."""
        return ran_program(self.stored.raw)

    @property
    def steps(self) -> int | None:
        """Training steps before its loss (warm-up included), when recorded."""
        steps = measured(self.stored)["steps"]
        return steps if isinstance(steps, int) else None

    @property
    def window_iters(self) -> int | None:
        """Iterations in its measured window (the count a window's length is compared at), when recorded."""
        window = measured(self.stored)["window_iters"]
        return window if isinstance(window, int) else None

    @property
    def loss_at(self) -> Mapping[int, float] | None:
        found: Mapping[int, float] | None = measured(self.stored)["loss_at"]
        return found

    def definition(self, metric: str) -> str:
        """How this repeat obtained the metric, in the words comparability compares ('how [unit]')."""
        d = definitions(self.stored.metrics)
        return definition_text(d[f"how_{metric}"], d[f"unit_{metric}"])


def admitted(repeats: Iterable[StoredRepeat]) -> list[Repeat]:
    """Stored repeats as admission sees them, for code that walks repeats rather than the frame."""
    return [Repeat.of(r) for r in repeats]

