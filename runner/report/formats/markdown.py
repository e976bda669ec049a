"""report.md: the views through Jinja2 (Markdown escaped), plots as PNG files beside it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from runner.base import safewrite
from runner.report.formats import register
from runner.report.formats.base import REPORT_MODE, Format, write_text

if TYPE_CHECKING:
    from runner.report.plots import Plot
    from runner.report.views import ReportModel


class Markdown(Format):
    name = "md"
    plots = ("png",)

    def write(self, model: ReportModel, out: Path, plots: list[Plot]) -> list[Path]:
        from runner.report.render import render_template

        written, shown = [], []
        for p in plots:
            if p.png is None:
                continue
            path = safewrite.folder(out / "plots") / f"{p.name}.png"
            written.append(safewrite.write_bytes(path, p.png, mode=REPORT_MODE))
            shown.append({"title": p.title, "path": f"plots/{p.name}.png"})
        written.append(write_text(out / "report.md", render_template("report.md.j2", r=model, plots=shown)))
        return written


register(Markdown())
