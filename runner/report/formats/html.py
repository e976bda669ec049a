"""report.html: the views through Jinja2 (autoescaped), each chart drawn in the page by the Vega bundle written into
it; one file that opens from file:// with nothing fetched."""

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


class Html(Format):
    name = "html"
    plots = ("vega",)

    def from_model(self, model: ReportModel, charts: dict[str, list[Chart]]) -> dict[str, Callable[[], str]]:
        return {"report.html": partial(page, model, charts)}

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        return self.write_ahead(model, out, charts, None)

    def write_ahead(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]],
                    texts: Aside | None) -> list[Path]:
        make = partial(page, model, charts)
        return [write_text(out / "report.html", texts.text("report.html", make) if texts else make())]


def page(model: ReportModel, charts: dict[str, list[Chart]]) -> str:
    """report.html's text: the views through the template, the Vega bundle written in where there are charts."""
    from runner.report import tone
    from runner.report.render import chart_script, page_scripts, render_template

    bundle, embed = page_scripts() if any(charts.values()) else ("", "")
    return render_template("report.html.j2", r=model, charts=charts, spec=chart_script, bundle=bundle, embed=embed,
                           tone_css=tone.css())


register(Html())
