"""Every list a user reads in `--help` is made from the table that defines it: the metric table (runner/record/
metrics.py: names, aliases, the gate's rule words, the site's metrics), the report format registry and each command's
own formats. A metric added to the table is listed with no other edit; none is left out (as `mfu`, `data_wait` and
the phase throughputs once were)."""

from __future__ import annotations

import importlib

import pytest
from typer.testing import CliRunner

from runner import cli
from runner.commands import metric_help, metric_names, rules_help
from runner.record.metrics import HEADLINE, METRICS, Metric
from runner.report import COMPARE_FORMATS, DIFF_FORMATS
from runner.report.formats import FORMATS


def help_of(*argv: str) -> str:
    """A command's --help as one line of words (the terminal's boxes and wrapping taken out)."""
    done = CliRunner().invoke(cli.app, [*argv, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert done.exit_code == 0, done.output
    return " ".join(w for w in done.output.split() if w not in ("│", "╭", "╰"))


def test_compare_and_bisect_list_every_metric_and_alias_of_the_table() -> None:
    for argv in (["compare"], ["bisect"]):
        text = help_of(*argv)
        missing = [n for n in metric_names() if n not in text]
        assert missing == [], (argv, missing)
        assert f"[default: {HEADLINE}]" in text
    assert "status (only how the repeats ended)" in help_of("bisect")


def test_compare_lists_every_rule_of_the_gate() -> None:
    text = help_of("compare")
    assert all(f"{word}:X%" in text for word in METRICS.rules())


def test_publish_lists_the_metrics_the_site_plots() -> None:
    text = help_of("publish")
    assert all(m.name in text for m in METRICS.shown("site"))
    assert "mfu" not in text  # not a metric the site plots


def test_each_format_option_lists_its_commands_formats() -> None:
    check = importlib.import_module("runner.commands.check")
    bisect = importlib.import_module("runner.commands.bisect")
    for argv, formats in ((["report"], FORMATS.names()), (["compare"], COMPARE_FORMATS), (["diff"], DIFF_FORMATS),
                          (["check"], check.FORMATS), (["bisect"], bisect.FORMATS)):
        text = help_of(*argv)
        assert all(f in text for f in formats), (argv, formats)


@pytest.mark.parametrize("make", [metric_help, rules_help])
def test_a_metric_added_to_the_table_is_listed(make: object) -> None:
    toy = Metric("toy_rate", "toy rate", "toy/s", True, aliases=("toy",), rule="toyslower")
    before = make()  # type: ignore[operator]
    with METRICS.adding(toy):
        during = make()  # type: ignore[operator]
    assert "toy" not in before and "toy" in during
    assert "toy" not in metric_names() and make() == before  # type: ignore[operator]
