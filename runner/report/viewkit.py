"""What a report view is: a name, an order and a build from the analysis frames and the runs they came from
(docs/internals.md, "How to add a report view"). The templates and the JSON writer loop over the built views;
no view is named outside its own module and its line in runner/report/viewset/__init__.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import pandas as pd

from runner.report import fmt
from runner.report.fmt import Section


@dataclass(frozen=True)
class Context:
    """What every view builds from: the rows the tables show (`shown`: each name's newest definition), their
    per-cell summary, the environments, the runs, and every stored measurement over time (`history`)."""

    shown: pd.DataFrame
    summary: pd.DataFrame
    info: pd.DataFrame
    run_records: list[dict[str, Any]]
    history: pd.DataFrame
    families: Any = None   # runner/report/pairs.py Families: every pair the report judges, computed once


@dataclass
class Built:
    """One view as built for one report: its sections (none: the view is left out of the pages), the frame
    behind them, and anything else its JSON needs."""

    view: View
    sections: list[Section]
    frame: pd.DataFrame = field(default_factory=pd.DataFrame)
    extra: Any = None

    @property
    def shown(self) -> bool:
        return bool(self.sections)

    def json(self) -> dict[str, Any]:
        return self.view.json(self)


class View:
    """A report view. Subclass it, set the class fields and write `build`; Markdown and HTML show its
    sections under `heading` (each section's title when `titled`) and report.json carries `json`."""

    name: ClassVar[str]             # the HTML anchor and the report.json key
    order: ClassVar[int]            # place among the views (after the precision grid, before the plots)
    heading: ClassVar[str]
    nav: ClassVar[str] = ""         # the link text in the HTML page's navigation (default: heading)
    intro: ClassVar[str] = ""       # one paragraph under the heading, plain text (escaped)
    intro_md: ClassVar[str] = ""    # the same paragraph as Markdown, where it has markup of its own
    titled: ClassVar[bool] = True   # print each section's title as a sub-heading

    def build(self, ctx: Context) -> Built:
        raise NotImplementedError

    def json(self, built: Built) -> dict[str, Any]:
        """The view's entries in report.json: by default its frame as records under its name."""
        return {self.name: fmt.records(built.frame)}

    @property
    def nav_text(self) -> str:
        return self.nav or self.heading

    @property
    def intro_markdown(self) -> fmt.MdSafe | str:
        return fmt.MdSafe(self.intro_md) if self.intro_md else self.intro
