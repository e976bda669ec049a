"""What a report format is: a name, whether it draws the charts (`plots`: png for Markdown, vega for HTML, none for
data), and a `write` that turns the built report into files in a folder, each through runner/base/safewrite.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from runner.base import safewrite

if TYPE_CHECKING:
    from runner.report.charts import Chart
    from runner.report.views import ReportModel

REPORT_MODE = 0o644  # a report is for others to read (under the umask)


class Format:
    """A report format. Subclass it, set `name` (and `plots`), write `write`, and register an instance."""

    name: ClassVar[str]
    plots: ClassVar[tuple[str, ...]] = ()   # "png", "vega": how this format shows runner/report/charts.py's charts

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        """`charts`: every chart of the report by the section it belongs to (render.report_charts)."""
        raise NotImplementedError


def write_text(path: Path, text: str) -> Path:
    return safewrite.write_text(path, text, mode=REPORT_MODE)
