"""report.html: the views through Jinja2 (autoescaped), plots inline as SVG; one file that opens from file://."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.report.formats import register
from runner.report.formats.base import Format, write_text

if TYPE_CHECKING:
    from runner.report.plots import Plot
    from runner.report.views import ReportModel


class Html(Format):
    name = "html"
    plots = ("svg",)

    def write(self, model: ReportModel, out: Path, plots: list[Plot]) -> list[Path]:
        from runner.report.render import render_template, trusted_svg

        svgs = [{"title": p.title, "name": p.name, "svg": trusted_svg(p)} for p in plots if p.svg]
        return [write_text(out / "report.html", render_template("report.html.j2", r=model, plots=svgs))]


register(Html())
