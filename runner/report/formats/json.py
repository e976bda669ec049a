"""report.json: every view's numbers, schema-versioned (runner/report/render.py JSON_SCHEMA), no NaN."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Json(Format):
    name = "json"

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        from runner.report.render import report_json

        return [write_text(out / "report.json", report_json(model))]


register(Json())
