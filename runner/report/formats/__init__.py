"""Report formats, one module each (docs/internals.md, "How to add a report format"): a format is a `Format`
(runner/report/formats/base.py) registered under its name; adding one is its module and its line in MODULES below.
`matrix report --format NAME` takes any registered name."""

from __future__ import annotations

from runner.base.registry import Registry
from runner.report.formats.base import Format

# The built-in formats, in the order `--help` lists them; each module registers its own.
MODULES = {"md": "runner.report.formats.markdown", "html": "runner.report.formats.html",
           "csv": "runner.report.formats.csv", "json": "runner.report.formats.json"}
FORMATS: Registry[Format] = Registry("report format", MODULES, ordered=True)


def register(fmt: Format) -> Format:
    """Make a format available to `matrix report --format` under its name (a name taken twice is refused)."""
    return FORMATS.register(fmt.name, fmt)


__all__ = ["FORMATS", "Format", "register"]
