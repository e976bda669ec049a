"""A formatted table: what the console, the Markdown and the HTML reports all render (one type, kept below
them all so that the console need not reach up into the report for it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TableCell:
    """One formatted table cell; `cls` is a CSS hint for HTML (num, good, bad, muted, status)."""

    text: str
    cls: str = ""


@dataclass
class Table:
    """A formatted table: what both the Markdown and the HTML templates render."""

    columns: list[str]
    rows: list[list[TableCell]] = field(default_factory=list)
    align: list[str] = field(default_factory=list)  # "l" or "r" per column
    caption: str = ""
    row_classes: list[str] = field(default_factory=list)  # CSS class per row ("group" starts a block)

    def add(self, *cells: TableCell | str, row_class: str = "") -> None:
        self.rows.append([c if isinstance(c, TableCell) else TableCell(str(c)) for c in cells])
        self.row_classes.append(row_class)

    def aligns(self) -> list[str]:
        return self.align + ["l"] * (len(self.columns) - len(self.align))
