"""report.json: every view's numbers, schema-versioned (runner/report/render.py JSON_SCHEMA), no NaN."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.base.aside import Aside
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Json(Format):
    name = "json"

    def from_model(self, model: ReportModel, charts: dict[str, list[Chart]]) -> dict[str, Callable[[], str]]:
        from runner.report.render import report_json

        return {"report.json": partial(report_json, model)}

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        return self.write_ahead(model, out, charts, None)

    def write_ahead(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]],
                    texts: Aside | None) -> list[Path]:
        make = self.from_model(model, charts)["report.json"]
        return [write_text(out / "report.json", texts.text("report.json", make) if texts else make())]


register(Json())
