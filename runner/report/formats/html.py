"""report.html: the views through Jinja2 (autoescaped), each chart drawn in the page by the Vega bundle written into
it; one file that opens from file:// with nothing fetched."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Html(Format):
    name = "html"
    plots = ("vega",)

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        from runner.report import tone
        from runner.report.render import chart_script, page_scripts, render_template

        bundle, embed = page_scripts() if any(charts.values()) else ("", "")
        return [write_text(out / "report.html", render_template(
            "report.html.j2", r=model, charts=charts, spec=chart_script, bundle=bundle, embed=embed,
            tone_css=tone.css()))]


register(Html())
