"""CSV formula injection: every CSV the tool writes neutralises text a spreadsheet would run (OWASP)."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from runner.report import compare_command, report_command
from runner.report.fmt import FORMULA_START, csv_text
from tests.report.conftest import fill_store, load_results

FORMULAS = ['=HYPERLINK("http://evil.example","click")', "@SUM(1+1)", "+cmd|' /C calc'!A0", "-1+1",
            "\tTAB", "\rCR"]
ENV, TAG = FORMULAS[0], FORMULAS[2]


def injected(data: dict[str, Any]) -> dict[str, Any]:
    env = data["environments"].pop("cluster-pt041")
    env["tags"] = [TAG, *env["tags"]]
    data["environments"][ENV] = env
    for r in data["results"]:
        if r["environment"] == "cluster-pt041":
            r["environment"] = ENV
            r["reason"] = "@SUM(9)" if r["reason"] else r["reason"]
    return data


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("csv")
    db = fill_store(tmp / "results.db", injected(load_results()))
    report_command(db, None, ["csv"], tmp / "out")
    return {"summary.csv": (tmp / "out" / "summary.csv").read_text(),
            "repeats.csv": (tmp / "out" / "repeats.csv").read_text(),
            "compare.csv": compare_command(db, "ngc-18.07", ENV, "csv"),
            "compare-tag.csv": compare_command(db, "ngc-18.07", TAG, "csv")}


def cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("name", ["summary.csv", "repeats.csv", "compare.csv", "compare-tag.csv"])
def test_no_cell_starts_a_formula(files: dict[str, str], name: str) -> None:
    rows = cells(files[name])
    texts = [c for row in rows for c in row]
    assert "'" + ENV in texts, f"{name} should hold the environment, neutralised"
    for row in rows[1:]:
        for value in row:
            if value.startswith(FORMULA_START):
                float(value)  # only a number may start with '-' or '+' (and it stays a number)
    assert f'"\'{ENV.replace(chr(34), chr(34) * 2)}"' in files[name]  # prefixed and quoted


def test_numbers_stay_numbers(files: dict[str, str]) -> None:
    df = pd.read_csv(io.StringIO(files["repeats.csv"]))
    assert pd.api.types.is_numeric_dtype(df["repeat"]) and pd.api.types.is_numeric_dtype(df["throughput"])


def test_csv_text_neutralises_every_formula_start_and_leaves_numbers() -> None:
    df = pd.DataFrame({"text": [*FORMULAS, "ok", None], "n": [-1, 2, -3, 4, 5, 6, 7, 8],
                       "mixed": [-1.5, "-2", "a,b", True, 1, "x", "=1", None]})
    text = csv_text(df)
    rows = cells(text)
    assert [r[0] for r in rows[1:]] == ["'" + f for f in FORMULAS] + ["ok", ""]
    assert [r[1] for r in rows[1:]] == ["-1", "2", "-3", "4", "5", "6", "7", "8"]
    assert [r[2] for r in rows[1:]] == ["-1.5", "'-2", "a,b", "True", "1", "x", "'=1", ""]
    assert cells(csv_text(pd.DataFrame({"=evil": [1]})))[0] == ["'=evil"]


def test_every_csv_writer_goes_through_csv_text() -> None:
    """No CSV is written by pandas directly: one function neutralises them all."""
    root = Path(__file__).resolve().parents[2] / "runner"
    offenders = [str(p) for p in root.rglob("*.py") if ".to_csv(" in p.read_text() and p.name != "fmt.py"]
    assert offenders == []
