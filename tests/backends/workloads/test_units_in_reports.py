"""A metric's unit and definition flow from each repeat (metrics.definitions) to the analysis frame
(how_<m>, unit_<m>) and to every table and plot label: a program counting tokens is never shown in img/s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner import analysis as an
from runner import matrix as matrix_mod
from runner.execution.printer import summary_table
from runner.report.views import grid_sections

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
    df = an.frame(an.StoredRepeat.many([row(0, 10.0, {"throughput": TOKENS}), row(1, 11.0, None)]))
    assert list(df["unit_throughput"]) == ["tok/s", "img/s"]
    assert list(df["how_throughput"]) == [TOKENS["how"], "bench: items over the synchronised measured window"]
    assert list(df["unit_iter_time"]) == ["ms", "ms"]


def test_tables_label_the_throughput_in_the_programs_own_unit() -> None:
    rows = [row(r, 10.0 + r, {"throughput": TOKENS}) for r in range(3)]
    columns = summary_table(M.cells(), an.StoredRepeat.many(rows)).columns
    assert "tok/s (mean ± std)" in columns and not any("img/s" in c for c in columns), columns
    (section,) = grid_sections(an.summarize(an.frame(an.StoredRepeat.many(rows))))
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
    df = an.frame(an.StoredRepeat.many([r, bench]))
    assert list(df["settings"]) == ["", "iterations=50 warmup=10 seed=0"]
    assert df["warmup_iters"].isna().tolist() == [True, False] and df["window_iters"].isna().tolist() == [True, False]
    assert df["steps"].isna().tolist()[0]


NANOGPT_LIKE = r'''
import sys
for i, ms in enumerate([900.0, 190.0, 210.0, 200.0]):
    print("iter %d: loss %.2f, time %.2fms, mfu %.2f%%" % (i * 10, 4.4 - i * 0.1, ms, -100.0 if i == 0 else 1.2))
'''


def test_a_program_printing_its_time_per_step_is_shown_in_its_own_unit(tmp_path: Path) -> None:
    from tests.backends.workloads.conftest import cli, rows

    (tmp_path / "train.py").write_text(NANOGPT_LIKE)
    (tmp_path / "m.yaml").write_text("""
name: gpt-like
environments: [{name: host, backend: local}, {name: other, backend: local, env: {OMP_NUM_THREADS: "1"}}]
workload:
  argv: ["{python}", "{files}/train.py"]
  files: [train.py]
  parser:
    kind: pattern
    items_per_step: "{batch_size} * {block_size}"
    items: tokens
    figures:
      iter_time: {regex: 'time ([0-9.]+)ms', unit: ms, reduce: mean, skip: 1}
      loss_end: {regex: 'loss ([0-9.]+)'}
axes: {batch_size: [12], block_size: [64]}
run: {repeats: 2, timeout: 120}
""")
    run = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "tokens/s (mean ± std)" in run.stdout and "img/s" not in run.stdout
    got = rows(tmp_path / "r.db")
    assert all(r["metrics"]["throughput"] == 12 * 64 / 0.2 for r in got)
    assert got[0]["metrics"]["definitions"]["throughput"]["unit"] == "tokens/s"
    show = cli("show", "--db", "r.db", cwd=tmp_path)
    assert "tokens/s" in show.stdout and "img/s" not in show.stdout, show.stdout
    report = cli("report", "--db", "r.db", "--format", "md", "--out", "rep", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "throughput (tokens/s)" in md and "warmup=10" not in md and "iterations=50" not in md
    compare = cli("compare", "host", "other", "--db", "r.db", cwd=tmp_path)
    assert "Metric: throughput (tokens/s)" in compare.stdout and "(img/s)" not in compare.stdout, compare.stdout


def test_a_reference_on_a_workload_is_judged_in_its_own_unit() -> None:
    import pandas as pd

    from runner.analysis import references

    (ref,) = references.parse([{"throughput": ">= 5"}], lambda loc: "m.yaml")
    (cell,) = M.cells()
    df = an.frame(an.StoredRepeat.many([row(r, 10.0, {"throughput": TOKENS}) for r in range(2)]))
    judged = references._judgement(ref, cell, df, an.METRICS["throughput"], ref.bounds["throughput"], ["batch_size"])
    assert judged.unit == "tok/s" and judged.verdict.value == "pass"
    bench = references._judgement(ref, cell, pd.DataFrame(an.frame(an.StoredRepeat.many([row(0, 10.0, None)]))), an.METRICS["throughput"],
                                  ref.bounds["throughput"], ["batch_size"])
    assert bench.unit == "img/s"


def test_the_scaling_table_is_headed_in_the_rows_unit() -> None:
    """A transformer's tok/s was headed `throughput (img/s)` in the Scaling table: the heading is the rows'."""
    from runner.report.viewset.scaling import scaling_sections
    (cell,) = M.cells()
    rows = [{**row(i, 100.0 * gpus + i, {"throughput": TOKENS}), "id": 10 * gpus + i, "cell_key": f"k{gpus}",
             "params": {**cell.params, "gpus": gpus}} for gpus in (1, 2) for i in range(2)]
    (section,) = scaling_sections(an.scaling(an.summarize(an.frame(an.StoredRepeat.many(rows)))))
    assert section.table is not None
    assert "throughput (tok/s)" in section.table.columns and not any("img/s" in c for c in section.table.columns)


def test_bisects_environments_table_is_headed_in_the_samples_unit() -> None:
    from runner.analysis.bisect_search import Sample, Settings, bisect, replay
    from runner.analysis.comparable import definition_text
    from runner.report.bisect_answer import BisectReport, Cost, tables
    defined = definition_text(TOKENS["how"], "tok/s")
    samples = [Sample(("ok",) * 3, (100.0, 101.0, 99.0), definition=defined),
               Sample(("ok",) * 3, (80.0, 81.0, 79.0), definition=defined)]
    settings = Settings(levels=(3,))
    answer = bisect(2, replay(samples), settings)
    report = BisectReport(["v1", "v2"], "cell", an.METRICS["throughput"], settings, answer, Cost(2, 2, 6, 0, 3, 3))
    envs = tables(report)[0][1]
    assert envs.columns[-1] == "throughput (tok/s)", envs.columns
