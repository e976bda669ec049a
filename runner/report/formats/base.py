"""What a report format is: a name, the plots it needs (png for Markdown, inline svg for HTML, none for data), and a
`write` that turns the built report into files in a folder, each through runner/base/safewrite.py."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from runner.base import safewrite

if TYPE_CHECKING:
    from runner.report.plots import Plot
    from runner.report.views import ReportModel

REPORT_MODE = 0o644  # a report is for others to read (under the umask)


class Format:
    """A report format. Subclass it, set `name` (and `plots`), write `write`, and register an instance."""

    name: ClassVar[str]
    plots: ClassVar[tuple[str, ...]] = ()   # "png", "svg": what runner/report/plots.py makes for this format

    def write(self, model: ReportModel, out: Path, plots: list[Plot]) -> list[Path]:
        raise NotImplementedError


def write_text(path: Path, text: str) -> Path:
    return safewrite.write_text(path, text, mode=REPORT_MODE)
