"""summary.csv (one row per cell) and repeats.csv (one per repeat), cells a spreadsheet would run neutralised."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.report import fmt
from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.base.aside import Aside
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Csv(Format):
    name = "csv"

    def ahead(self, frame: Any) -> dict[str, Callable[[], str]]:
        return {"repeats.csv": lambda: repeats_csv(frame)}  # the frame alone: made while the views are built

    def from_model(self, model: ReportModel, charts: dict[str, list[Chart]]) -> dict[str, Callable[[], str]]:
        return {"summary.csv": partial(fmt.csv_text, model.summary)}

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        return self.write_ahead(model, out, charts, None)

    def write_ahead(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]],
                    texts: Aside | None) -> list[Path]:
        summary, repeats = self.from_model(model, charts)["summary.csv"], partial(repeats_csv, model.frame)
        return [write_text(out / "summary.csv", texts.text("summary.csv", summary) if texts else summary()),
                write_text(out / "repeats.csv", texts.text("repeats.csv", repeats) if texts else repeats())]


def repeats_csv(frame: Any) -> str:
    from runner.report.render import repeats_frame

    return fmt.csv_text(repeats_frame(frame))


register(Csv())
