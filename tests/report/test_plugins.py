"""Adding a report format is its module and one registration (runner/report/formats/): a toy format registered at
run time is written by `matrix report --format`, with nothing else changed; a name taken twice is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.base.errors import BackendError
from runner.report.formats import FORMATS, Format, register
from runner.report.formats.base import write_text
from runner.report.views import ReportModel
from tests.analysis.helpers import rows_for, store_of


class Cells(Format):
    """A toy format: one line per cell with its repeats."""

    name = "cells"

    def write(self, model: ReportModel, out: Path, plots: list) -> list[Path]:
        lines = [f"{r['model']} {r['precision']} {r['batch_size']}: {r['statuses']}" for r in
                 model.summary.to_dict("records")]
        return [write_text(out / "cells.txt", "\n".join(lines) + "\n")]


@pytest.fixture
def toy() -> object:
    register(Cells())
    yield FORMATS
    FORMATS.forget("cells")


def test_a_format_registered_by_a_plug_in_is_one_report_asks_for(toy: object, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from runner import cli

    db = store_of(tmp_path / "s.db", rows_for("k", [100.0, 101.0], run_id="r"))
    out = CliRunner().invoke(cli.app, ["report", "--db", str(db), "--format", "cells", "--format", "json",
                                       "--out", str(tmp_path / "rep")])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "rep" / "cells.txt").read_text() == "mnist_cnn fp32 32: 2 ok\n"
    assert (tmp_path / "rep" / "report.json").exists() and not (tmp_path / "rep" / "report.md").exists()


def test_a_format_name_taken_twice_is_refused_and_an_unknown_one_lists_the_known(toy: object, tmp_path: Path) -> None:
    with pytest.raises(BackendError, match="registered twice"):
        register(Cells())
    from typer.testing import CliRunner

    from runner import cli

    db = store_of(tmp_path / "s.db", rows_for("k", [100.0, 101.0], run_id="r"))
    out = CliRunner().invoke(cli.app, ["report", "--db", str(db), "--format", "pdf", "--out", str(tmp_path / "r")])
    assert out.exit_code == 2 and "cells" in out.output and "md" in out.output, out.output
