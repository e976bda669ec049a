"""report.html: the views through Jinja2 (autoescaped), each chart drawn in the page by the Vega bundle written into
it; one file that opens from file:// with nothing fetched."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
        # The Vega bundle read (or made, and kept in the user's cache) here, before any child: a child writes
        # nothing but its pipe.
        return {"report.html": partial(page, model, charts, scripts(charts))}

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        return self.write_ahead(model, out, charts, None)

    def write_ahead(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]],
                    texts: Aside | None) -> list[Path]:
        make = partial(page, model, charts)
        return [write_text(out / "report.html", texts.text("report.html", make) if texts else make())]


def scripts(charts: dict[str, list[Chart]]) -> tuple[Any, Any]:
    """The Vega bundle and the script that draws the page's charts; none where there is no chart."""
    from runner.report.render import page_scripts

    return page_scripts() if any(charts.values()) else ("", "")


def page(model: ReportModel, charts: dict[str, list[Chart]], made: tuple[Any, Any] | None = None) -> str:
    """report.html's text: the views through the template, the Vega bundle written in where there are charts
    (`made`: `scripts(charts)`, where the caller has it)."""
    from runner.report import tone
    from runner.report.render import chart_script, render_template

    bundle, embed = made if made is not None else scripts(charts)
    return render_template("report.html.j2", r=model, charts=charts, spec=chart_script, bundle=bundle, embed=embed,
                           tone_css=tone.css())


register(Html())
