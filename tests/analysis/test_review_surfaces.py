"""A hostile review of what a user reads: the verdicts, intervals, answer and gate as the commands print them, on
stores built by hand. Each test fails on the code as reviewed and passes once the defect it names is fixed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from typer.testing import CliRunner

from runner.cli import app
from tests.analysis.helpers import rows_for, store_of


def shaped(mean: float, sd: float, n: int) -> list[float]:
    """n values whose mean and standard deviation (ddof=1) are exactly `mean` and `sd`."""
    z = np.linspace(-1.0, 1.0, n)
    z = (z - z.mean()) / z.std(ddof=1)
    return [float(v) for v in mean + sd * z]


def matrix(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.output


def pair(key: str, a: list[float], b: list[float], batch: int, **metrics: tuple[list[float], list[float]]
         ) -> list[dict[str, Any]]:
    """A cell measured on A and on B (same params), with other metrics per repeat beside the throughput."""
    ra = rows_for(f"a{key}", a, environment="A", start=1000.0 + batch, batch_size=batch)
    rb = rows_for(f"b{key}", b, environment="B", run_id="r2", start=5000.0 + batch, batch_size=batch)
    for name, (va, vb) in metrics.items():
        for rows, vals in ((ra, va), (rb, vb)):
            for r, v in zip(rows, vals, strict=True):
                r["metrics"][name] = v
    return ra + rb


# 1. A threshold other than a whole percent is printed rounded: --min-effect 0.025 said "same (within ±2%)" -----------

def test_compare_says_the_threshold_it_judged_by_not_a_rounded_one(tmp_path: Path) -> None:
    """--min-effect 0.025: the verdicts, the header and the footer said "±2%" and "at least 2%" (a format of '.0%');
    0.005 said "±0%" and "a change of at least 0%"."""
    db = store_of(tmp_path / "s.db", pair("1", shaped(100, 0.1, 5), shaped(101, 0.1, 5), 32)
                  + pair("2", shaped(100, 5, 3), shaped(101, 5, 3), 64))
    for given, said in (("0.025", "2.5%"), ("0.005", "0.5%")):
        for fmt in ("table", "md", "json", "csv"):
            code, out = matrix("compare", "A", "B", "--db", str(db), "--min-effect", given,
                               *(["--format", fmt] if fmt != "table" else []))
            assert code == 0, out
            shown = set(re.findall(r"(?:±|at least )([0-9.]+%)", out))
            assert shown == {said}, (given, fmt, shown)


# 2. JSON rounds every number to 10 decimal places: a p-value of 4e-11 is printed 0 ------------------------------------

def test_compare_json_keeps_small_figures_instead_of_rounding_them_to_zero(tmp_path: Path) -> None:
    """A 3% change with a 0.1% spread has p about 4e-11: the JSON said "p_value": 0.0 (what a pair without any spread
    says), and a figure of 3e-11 would be a mean of 0."""
    db = store_of(tmp_path / "s.db", pair("1", shaped(100, 0.1, 5), shaped(103, 0.1, 5), 32))
    code, out = matrix("compare", "A", "B", "--db", str(db), "--format", "json")
    assert code == 0, out
    (p,) = json.loads(out)["pairs"]
    assert 0 < p["p_value"] < 1e-9, p["p_value"]
    assert 0 < p["p_adjusted"] < 1e-9 and abs(p["p_adjusted"] / p["p_value"] - 1) < 1e-6, p


def test_json_records_keep_significant_figures_of_small_and_large_numbers() -> None:
    import pandas as pd

    from runner.report.fmt import records

    df = pd.DataFrame({"x": [3.3e-11, 1.23456e-8, 1e-300, 123456.123456789, 1e12, 0.0, float("nan")]})
    got = [r["x"] for r in records(df)]
    assert got[:3] == [3.3e-11, 1.23456e-8, 1e-300], got
    assert got[3] == 123456.123456789 and got[4] == 1e12 and got[5] == 0.0 and got[6] is None, got


# 3. The gate printed peak memory in bytes, without a unit, beside compare's MiB ---------------------------------------

def test_the_gate_table_shows_a_figure_in_the_unit_compare_shows_it(tmp_path: Path) -> None:
    """memory:5% on 4096 MiB against 8192 MiB: the gate's A and B columns said 4294967296.0 and 8589934592.0."""
    mib = float(2**20)
    db = store_of(tmp_path / "s.db", pair("1", shaped(100, 1, 4), shaped(100, 1, 4), 32,
                                          peak_mem_allocated=([4096 * mib] * 4, [8192 * mib] * 4)))
    code, out = matrix("compare", "A", "B", "--db", str(db), "--fail-on", "memory:5%")
    assert code == 1, out
    row = next(line for line in out.splitlines() if "memory:5%" in line and "fail" in line)
    assert "4294967296" not in row and re.search(r"\b4096(\.0)? MiB", row) and re.search(r"\b8192(\.0)? MiB", row), row
    code, out = matrix("compare", "A", "B", "--db", str(db), "--fail-on", "slower:3%,memory:5%", "--format", "md")
    assert code == 1, out
    assert re.search(r"\b4096(\.0)? MiB", out) and "4294967296" not in out, out


# 4. The answer said one cell both "1.12x slower" and "undecided": two definitions of it, labelled alike -------------

def test_the_answer_tells_apart_two_definitions_of_one_cell(tmp_path: Path) -> None:
    """A cell measured three times under one definition (the last a 10% drop) and twice under another: the answer
    listed "A · mnist_cnn · ...: the latest run is 1.12x slower than the run before" and "A · mnist_cnn · ...: the
    latest run against the run before is undecided" under one label, though the history table tells them apart."""
    rows = (rows_for("k1", shaped(100, 1, 4), environment="A", run_id="r1", start=1000.0)
            + rows_for("k1", shaped(100.5, 1, 4), environment="A", run_id="r2", start=2000.0)
            + rows_for("k1", shaped(90, 1, 4), environment="A", run_id="r3", start=3000.0)
            + rows_for("k2", shaped(120, 1, 4), environment="A", run_id="r4", start=4000.0)
            + rows_for("k2", shaped(121, 5, 3), environment="A", run_id="r5", start=5000.0))
    db = store_of(tmp_path / "s.db", rows)
    code, out = matrix("report", "--db", str(db), "--format", "md", "--out", str(tmp_path / "rep"))
    assert code == 0, out
    text = (tmp_path / "rep" / "report.md").read_text()
    answer = text.split("## The answer", 1)[1].split("\n## ", 1)[0]
    said = [line for line in answer.splitlines() if line.startswith("- ")]
    assert len(said) == 2, answer
    labels = [line[2:].split(": ", 1)[0] for line in said]
    assert labels[0] != labels[1], said
    assert any("k1" in label for label in labels) and any("k2" in label for label in labels), said
