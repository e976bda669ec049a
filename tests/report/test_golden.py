"""Rendered reports and comparisons from the checked-in fixtures, compared byte for byte with golden files.

Regenerate after an intended change with MATRIX_UPDATE_GOLDEN=1 and review the diff like code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from runner.report import compare_command, report_command
from tests.report.conftest import fill_store, load_results

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
UPDATE = os.environ.get("MATRIX_UPDATE_GOLDEN", "") not in ("", "0")


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden file {path}: run with MATRIX_UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from its golden file; if intended, MATRIX_UPDATE_GOLDEN=1"


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("golden")
    out = tmp / "report"
    report_command(fill_store(tmp / "results.db", load_results()), None, ["md", "json", "csv"], out)
    return out


def test_report_markdown_golden(report_dir: Path) -> None:
    check_golden("report.md", (report_dir / "report.md").read_text())


def test_report_json_golden(report_dir: Path) -> None:
    text = (report_dir / "report.json").read_text()
    doc = json.loads(text)
    assert doc["schema"] == 3 and doc["kind"] == "matrix-report"
    check_golden("report.json", text)


def test_compare_markdown_golden(db: Path) -> None:
    check_golden("compare.md", compare_command(db, "ngc-18.07", "cluster-pt041", "md"))


def test_compare_json_golden(db: Path) -> None:
    text = compare_command(db, "ngc-18.07", "cluster-pt041", "json")
    doc = json.loads(text)
    assert doc["kind"] == "matrix-compare" and doc["a"]["environments"] == ["ngc-18.07"]
    check_golden("compare.json", text)


def test_compare_by_tags_golden(db: Path) -> None:
    """Tags and run ids select the same sides here, so they give the same pairs."""
    by_tag = compare_command(db, "container", "slurm", "md")
    check_golden("compare-tags.md", by_tag)
    by_run = compare_command(db, "20240105", "20240106", "json")
    by_env = compare_command(db, "ngc-18.07", "cluster-pt041", "json")
    assert json.loads(by_run)["pairs"] == json.loads(by_env)["pairs"]


def test_report_shows_every_view_the_fixture_has_axes_for(report_dir: Path) -> None:
    md = (report_dir / "report.md").read_text()
    for heading in ("## The answer", "## Precision grid", "## Environment comparison", "## Precision summary",
                    "## Scaling", "## Cells that did not end ok"):
        assert heading in md
    assert "373.7 (n=1)" in md                 # the single-repeat cell: a value, said to be one repeat
    assert "nan" not in md.lower()
    assert "3 oom" in md and "1 unsupported" in md and "(1 failed)" in md
    assert "Tesla V100-SXM2-16GB" in md and "driver 410.48" in md   # the hardware is named
    for png in ("answer", "throughput", "iter_time", "peak_mem", "scaling"):
        assert (report_dir / "plots" / f"{png}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_views_only_when_the_data_has_their_axes(results_data: dict, make_db, tmp_path: Path) -> None:
    """One environment, one GPU count: no environment comparison and no scaling section."""
    results_data["results"] = [r for r in results_data["results"]
                               if r["environment"] == "ngc-18.07" and r["params"]["gpus"] == 1]
    results_data["runs"] = results_data["runs"][:1]
    out = tmp_path / "one"
    report_command(make_db(results_data), None, ["md"], out)
    md = (out / "report.md").read_text()
    assert "## Precision grid" in md and "## Precision summary" in md
    assert "## Environment comparison" not in md and "## Scaling" not in md
    assert not (out / "plots" / "scaling.png").exists()
