"""The report's views after the precision grid, one module each (docs/internals.md, "How to add a report
view"): adding a view is its module and its line here."""

from __future__ import annotations

from runner.report.viewkit import View
from runner.report.viewset import admission, comparison, history, machines, precision, scaling

VIEWS: list[View] = sorted([
    admission.AdmissionView(),
    comparison.ComparisonView(),
    precision.PrecisionView(),
    scaling.ScalingView(),
    history.HistoryView(),
    machines.MachinesView(),
], key=lambda v: v.order)
