"""Environment comparison: every environment against the first, with the same pairs and verdicts as `compare`."""

from __future__ import annotations

from typing import Any

from runner.report.pairs import comparison_doc, comparison_sections
from runner.report.viewkit import Built, Context, View


class ComparisonView(View):
    name = "comparison"
    order = 10
    heading = "Environment comparison"

    def build(self, ctx: Context) -> Built:
        sections, comparisons = comparison_sections(ctx.shown, ctx.summary, ctx.families)
        return Built(self, sections, extra=comparisons)

    def json(self, built: Built) -> dict[str, Any]:
        return {"comparisons": [comparison_doc(c) for _, _, c in built.extra]}
