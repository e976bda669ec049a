"""A metric's unit and definition flow from each repeat (metrics.definitions) to the analysis frame
(how_<m>, unit_<m>) and to every table and plot label: a program counting tokens is never shown in img/s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import analysis as an
from runner import matrix as matrix_mod
from runner.report.views import grid_sections
from runner.runprint import summary_table

M = matrix_mod.parse("""
environments: [{name: host, backend: local}]
workload:
  argv: ["{python}", "train.py", "{batch_size}"]
  parser: {kind: pattern, figures: {throughput: {regex: 'tput (\\\\S+)', unit: tok/s}}}
axes: {batch_size: [8]}
""", Path("m.yaml"))
TOKENS = {"how": "pattern: figure throughput /tput (\\S+)/, last of the matches after 0", "unit": "tok/s"}


def row(repeat: int, value: float, definitions: dict[str, Any] | None) -> dict[str, Any]:
    (cell,) = M.cells()
    metrics: dict[str, Any] = {"throughput": value}
    if definitions is not None:
        metrics["definitions"] = definitions
    return {"id": repeat, "cell_key": cell.key, "repeat": repeat, "environment": "host", "status": "ok",
            "params": dict(cell.params), "metrics": metrics, "reason": "", "raw": {"workload": {"parser": "pattern"}}}


def test_the_frame_carries_each_metrics_definition_with_the_benchmarks_as_default() -> None:
    df = an.frame([row(0, 10.0, {"throughput": TOKENS}), row(1, 11.0, None)])
    assert list(df["unit_throughput"]) == ["tok/s", "img/s"]
    assert list(df["how_throughput"]) == [TOKENS["how"], "bench: items over the synchronised measured window"]
    assert list(df["unit_iter_time"]) == ["ms", "ms"]


def test_tables_label_the_throughput_in_the_programs_own_unit() -> None:
    rows = [row(r, 10.0 + r, {"throughput": TOKENS}) for r in range(3)]
    columns = summary_table(M.cells(), rows).columns
    assert "tok/s (mean ± std)" in columns and not any("img/s" in c for c in columns), columns
    (section,) = grid_sections(an.summarize(an.frame(rows)))
    assert section.table is not None
    labels = [c.text for r in section.table.rows for c in r]
    assert "throughput (tok/s)" in labels and not any("img/s" in t for t in labels), labels


def test_two_units_in_one_column_are_both_said() -> None:
    assert an.metric_heading("throughput", ["tok/s", "img/s, tok/s"]) == "throughput (tok/s | img/s)"
    assert an.metric_heading("throughput", []) == "throughput (img/s)"


def test_a_workload_repeat_shows_no_warm_up_or_window_the_program_never_saw() -> None:
    r = row(0, 10.0, {"throughput": TOKENS})
    r["raw"] = {"params": {"batch_size": 8, "iterations": 50, "warmup": 10, "seed": 0},
                "workload": {"parser": "pattern", "argv": ["python", "train.py", "8"]}}
    bench = {**r, "raw": {"params": r["raw"]["params"], "workload": None}}
    df = an.frame([r, bench])
    assert list(df["settings"]) == ["", "iterations=50 warmup=10 seed=0"]
    assert df["warmup_iters"].isna().tolist() == [True, False] and df["window_iters"].isna().tolist() == [True, False]
    assert df["steps"].isna().tolist()[0]
