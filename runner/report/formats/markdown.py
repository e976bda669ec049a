"""report.md: the views through Jinja2 (Markdown escaped), each chart as a PNG beside it (vl-convert, no browser)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.base import safewrite
from runner.report.formats import register
from runner.report.formats.base import REPORT_MODE, Format, write_text

if TYPE_CHECKING:
    from runner.report.charts import Chart
    from runner.report.views import ReportModel


class Markdown(Format):
    name = "md"
    plots = ("png",)

    def write(self, model: ReportModel, out: Path, charts: dict[str, list[Chart]]) -> list[Path]:
        from runner.report.head import MD_ANCHORS
        from runner.report.render import render_template

        written: list[Path] = []
        shown: dict[str, list[dict[str, str]]] = {}
        for place, made in charts.items():
            shown[place] = []
            for c in made:
                path = safewrite.folder(out / "plots") / f"{c.name}.png"
                written.append(safewrite.write_bytes(path, c.png(), mode=REPORT_MODE))
                shown[place].append({"title": c.title, "path": f"plots/{c.name}.png", "caption": c.caption})
        written.append(write_text(out / "report.md", render_template("report.md.j2", r=model, charts=shown,
                                                                             anchors=MD_ANCHORS)))
        return written


register(Markdown())
