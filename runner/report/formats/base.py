"""What a report format is: a name, whether it draws the charts (`plots`: png for Markdown, vega for HTML, none for
data), and a `write` that turns the built report into files in a folder, each through runner/base/safewrite.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from runner.base import safewrite

if TYPE_CHECKING:
    from runner.base.aside import Aside
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

    def ahead(self, frame: Any) -> dict[str, Callable[[], str]]:
        """The texts this format can make from the repeats' frame alone, by file name. A report has them made in a
        child (runner/base/aside.py) while it builds its views, then calls `write_ahead`. None by default."""
        return {}

    def from_model(self, model: ReportModel, charts: dict[str, list[Chart]]) -> dict[str, Callable[[], str]]:
        """The texts this format writes that the built report alone makes (no PNG), by file name. A report has them
        made in children while it writes its other files, then calls `write_ahead`. None by default."""
        return {}

    def write_ahead(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]], texts: Aside) -> list[Path]:
        """`write`, with the texts `ahead` and `from_model` started taken from `texts` (`texts.text(name, make)`)."""
        return self.write(model, out, charts)


def write_text(path: Path, text: str) -> Path:
    return safewrite.write_text(path, text, mode=REPORT_MODE)
