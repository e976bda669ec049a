"""The report's JSON writer and the precision pairs against what they stand for: json's own indented text, byte for
byte, and compare's pairs of each precision against fp32 taken one precision at a time."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from runner import analysis as an
from runner.report import fmt, load, pairs, report_command

CASES: list[Any] = [
    {}, [], "plain", 3, None, 2.5, True,
    {"a": [], "b": {}, "c": [[], {}]},
    [1, [2, [3, []]], {}],
    {"rows": [{"x": 1.5, "y": None, "z": "é\n\"<tab>\t", "ok": True}, {"list": [1, 2.0, -0.0]}]},
    {1: {2.5: [None, math.nan, math.inf, -math.inf]}, False: "x", None: (1, (2, "3"))},
    [(1, (2,)), {"k": [{"deep": [{"deeper": []}]}]}],
    {"big": 1e16, "small": 1e-7, "int": 10**20},
]


@pytest.mark.parametrize("obj", CASES)
def test_json_text_is_jsons_indented_text(obj: Any) -> None:
    assert fmt.json_text(obj) == json.dumps(obj, indent=2, ensure_ascii=False)


def test_report_json_is_jsons_indented_text(db: Path, tmp_path: Path) -> None:
    """The whole report.json, as json's own indented writer would write what it holds."""
    text = report_command(db, None, ["json"], tmp_path / "report")[0].read_text()
    assert text == json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n"


def test_precision_pairs_are_each_precisions_own(db: Path) -> None:
    """Every precision's cells judged at once give the pairs each precision's rows alone give against fp32's."""
    df, _, _ = load(db)
    keys = tuple(k for k in an.PARAM_KEYS if k != "precision")
    m = an.METRICS["throughput"]
    envs = list(dict.fromkeys(df["environment"]))
    got = pairs.precision_pairs(df, envs, m)
    assert got, "the fixture has precisions to pair"
    for env, base, precision, table in got:
        rows = df[df["environment"] == env]
        alone, _ = an.pair_stats(an.side_stats(rows[rows["precision"] == base], m.name, keys),
                                 an.side_stats(rows[rows["precision"] == precision], m.name, keys), m, keys=keys)
        pd.testing.assert_frame_equal(table, alone)


@pytest.mark.parametrize("first", ["=1+1", "@cmd", "-2", "'quoted"])
def test_csv_neutralises_the_very_first_field(first: str) -> None:
    """The first header of a CSV starts no line break and follows no comma: it is neutralised and quoted as well."""
    text = fmt.csv_text(pd.DataFrame({first: ["a"], "b": ["c"]}))
    assert text.startswith(f'"\'{first}",b\n') if first[0] != "'" else text.startswith(f'"{first}",b\n')
