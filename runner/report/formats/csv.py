"""summary.csv (one row per cell) and repeats.csv (one per repeat), cells a spreadsheet would run neutralised."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.report import fmt
from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Csv(Format):
    name = "csv"

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        from runner.report.render import repeats_frame

        return [write_text(out / "summary.csv", fmt.csv_text(model.summary)),
                write_text(out / "repeats.csv", fmt.csv_text(repeats_frame(model.frame)))]


register(Csv())
