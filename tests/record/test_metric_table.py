"""One metric table (runner/record/metrics.py): a new metric is an entry there and its producer, nothing else. A toy
metric added at run time (a result's metrics.toy, read by its reader) shows in the frame, `compare --metric toy`, the
report's grid and JSON, the gate (its own rule word), `check` (a reference on it), the history and the site; and
what the table says of the built-in metrics (units for an image model, a transformer, a workload; admission's reach;
an imported repeat's provenance) reaches every command."""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from runner import analysis as an
from runner import cli, matrix
from runner.analysis import gate
from runner.analysis.history import history
from runner.publish import load as site_load
from runner.record.metrics import METRICS, Metric, Reach
from runner.record.readers import number
from runner.store import Store
from tests.analysis.helpers import rows_for, store_of

MATRIX = """
environments: [{name: A, backend: local}, {name: B, backend: local}]
axes: {model: [mnist_cnn], precision: [fp32]}
references:
  - match: {environment: A}
    toy: ">= 9"
  - match: {environment: B}
    toy: ">= 9"
"""


def read_toy(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    """The producer's figure: toys per second, as the result stores it."""
    return number(metrics.get("toy"))


TOY = Metric("toy", "toy rate", "toys/s", True, better="more toys", worse="fewer toys", stored_unit="toys/s",
             reader=read_toy, aliases=("toys",), reach=Reach(0.0, 1e6, False, "toys per second: above 0, at most 1e6"),
             raw_fields=("toy",), rule="fewer_toys", grid=7, precision=7, precision_table=6, machines=8, site=6)


@pytest.fixture
def toy() -> Iterator[Metric]:
    with METRICS.adding(TOY) as m:
        yield m
    assert "toy" not in METRICS and "toy" not in an.frame_columns()


def toy_rows(key: str, env: str, values: list[float], run_id: str, start: float) -> list[dict[str, Any]]:
    rows = rows_for(key, [100.0] * len(values), environment=env, run_id=run_id, start=start)
    for r, v in zip(rows, values, strict=True):
        r["metrics"]["toy"] = v
    return rows


def toy_store(tmp_path: Path) -> tuple[Path, matrix.Matrix]:
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(MATRIX))
    m = matrix.load(path)
    a, b = (next(c for c in m.cells() if c.env_name == e) for e in ("A", "B"))
    rows = (toy_rows(a.key, "A", [10.0, 10.2, 9.9, 10.1], "r1", 1000.0)
            + toy_rows(b.key, "B", [5.0, 5.1, 4.9, 5.05], "r1", 2000.0)
            + toy_rows(a.key, "A", [10.1, 10.0, 9.8, 10.2], "r2", 3000.0)
            + toy_rows(a.key, "A", [15.0, 15.2, 14.9, 15.1], "r3", 4000.0))
    return store_of(tmp_path / "toy.db", rows), m


def run(*args: str) -> Any:
    return CliRunner().invoke(cli.app, list(args), catch_exceptions=False)


def test_a_toy_metric_shows_everywhere_from_its_table_entry_alone(toy: Metric, tmp_path: Path) -> None:
    db, _ = toy_store(tmp_path)
    with Store(db, readonly=True) as store:
        df = an.frame(store.rows(latest_only=False))
    # The frame: its column, read by its reader, with its definition.
    assert "toy" in an.frame_columns() and sorted(set(df["toy"]))[:2] == [4.9, 5.0]
    assert set(df["unit_toy"]) == {"toys/s"} and set(df["how_toy"]) == {"bench: toy rate"}
    # compare --metric toy (by its alias too): B has half A's toys, in its own words.
    out = run("compare", "A", "B", "--db", str(db), "--metric", "toys", "--format", "json")
    doc = json.loads(out.stdout)
    (pair,) = doc["pairs"]
    assert doc["metric"] == "toy" and pair["ratio"] == pytest.approx(5.0125 / 15.05, rel=1e-3), doc  # A newest: r3
    assert "fewer toys" in json.dumps(doc)
    # The gate: the metric's own rule word; B's fewer toys trip it (exit 1).
    tripped = run("compare", "A", "B", "--db", str(db), "--metric", "toy", "--fail-on", "fewer_toys:10%",
                  "--format", "json")
    checks = json.loads(tripped.stdout)["gate"]["checks"]
    assert tripped.exit_code == 1 and [(c["metric"], c["verdict"]) for c in checks] == [("toy", "fail")]
    assert gate.parse_rules(["fewer_toys:3%"])[0].change(10.0, 5.0) == pytest.approx(1.0)
    # check: a reference on toy; A passes, B fails (5 toys/s is not >= 9).
    checked = run("check", "-m", str(tmp_path / "m.yaml"), "--db", str(db), "--format", "json")
    verdicts = {(j["cell"].split()[0], j["metric"]): j["verdict"] for j in json.loads(checked.stdout)["verdicts"]}
    assert verdicts == {("A", "toy"): "pass", ("B", "toy"): "fail"} and checked.exit_code == 1, checked.stdout
    # The report: a row of the grid, labelled from the table, and its statistics in report.json.
    assert run("report", "--db", str(db), "--format", "md", "--format", "json", "--out", str(tmp_path / "r")
               ).exit_code == 0
    md = (tmp_path / "r" / "report.md").read_text()
    assert "| toy rate (toys/s)  | 15.05 ± 0.13 |" in md and "5.013 ± 0.085" in md
    cells = json.loads((tmp_path / "r" / "report.json").read_text())["cells"]
    assert {round(c["toy_mean"], 4) for c in cells} == {15.05, 5.0125}
    # The history: A's third run is a step up in toys.
    h = history(df, "toy")
    assert list(h.loc[h["environment"] == "A", "step"]) == [False, False, True]
    # The site plots it: its place on the site, its figure read by its reader.
    assert site_load.history_metric("toy") is toy
    loaded = site_load.load([db], toy)
    assert sorted(set(loaded.repeats["value"]))[:1] == [4.9] and set(loaded.repeats["unit"]) == {"toys/s"}


def test_the_table_refuses_a_name_or_alias_twice() -> None:
    with pytest.raises(ValueError, match="memory is a metric's name or alias already"):
        METRICS.add(Metric("ram", "ram", "MiB", False, aliases=("memory",)))
    assert "ram" not in METRICS


def test_a_metric_left_out_by_admission_is_left_out_of_every_reading(toy: Metric) -> None:
    """An MFU above 1 (the peak the result names was wrong) and a toy rate beyond its reach: the repeat stays ok, the
    figure is NaN in the frame and None in the metrics walked by hand (the kit), kept in the store's record."""
    (row,) = rows_for("k", [100.0])
    row["metrics"].update(images=100.0, mfu=1.35, toy=2e6)
    rep = an.StoredRepeat.of(row)
    df = an.frame([rep])
    assert df["status"].iloc[0] == "ok" and math.isnan(df["mfu"].iloc[0]) and math.isnan(df["toy"].iloc[0])
    assert "mfu 1.35" in df["admission"].iloc[0] and "toy 2e+06" in df["admission"].iloc[0]
    walked = an.Repeat.of(rep)
    assert walked.metrics["mfu"] is None and walked.metrics["toy"] is None and walked.value("throughput") == 100.0
    assert rep.metrics["mfu"] == 1.35 and rep.admission.dropped == ("mfu", "toy")


@pytest.mark.parametrize(("model", "definitions", "unit", "per_joule"), [
    ("resnet50", None, "img/s", "img/J"),
    ("gpt2_124m", None, "tok/s", "tok/J"),  # a transformer: the built-in benchmark counts tokens
    ("bert", {"throughput": {"how": "mllog: mean of tracked_stats", "unit": "samples/s"}}, "samples/s", "img/J"),
])
def test_a_metrics_unit_comes_from_the_result_else_the_benchmark_for_its_model(
        model: str, definitions: dict[str, Any] | None, unit: str, per_joule: str) -> None:
    (row,) = rows_for("k", [100.0], model=model)
    if definitions:
        row["metrics"]["definitions"] = definitions
    df = an.frame([an.StoredRepeat.of(row)])
    assert (df["unit_throughput"].iloc[0], df["unit_images_per_joule"].iloc[0]) == (unit, per_joule)
    summary = an.summarize(df)
    assert an.metric_heading("throughput", summary["unit_throughput"]) == f"throughput ({unit})"


def test_an_imported_repeat_carries_its_provenance(tmp_path: Path) -> None:
    """A repeat imported from another machine's export knows the store that measured it, its row there, the file it
    came in and when; this store's own repeats are from here."""
    from runner.commands.export import export_command
    from runner.commands.import_ import import_command
    from runner.store.exchange import store_id

    theirs = store_of(tmp_path / "theirs.db", rows_for("k", [100.0, 101.0], environment="gpu", run_id="t1"))
    export_command(theirs, tmp_path / "theirs.jsonl.gz", None, None)
    ours = store_of(tmp_path / "ours.db", rows_for("k", [90.0], environment="gpu", run_id="o1"))
    import_command(ours, [tmp_path / "theirs.jsonl.gz"])
    with Store(theirs, readonly=True) as store:
        origin, their_ids = store_id(store), [r.id for r in store.rows()]
    with Store(ours, readonly=True) as store:
        reps = list(store.rows())
    mine = [r for r in reps if not r.imported]
    imported = [r for r in reps if r.imported]
    assert [r.origin for r in mine] == [an.Origin()] and len(imported) == 2
    assert {r.origin.store for r in imported} == {origin} and [r.origin.row for r in imported] == their_ids
    assert all(r.origin.source.endswith("theirs.jsonl.gz") and r.origin.imported_at for r in imported)
    assert all(r.run_id == f"t1@{origin}" and r.cell_key == f"k@{origin}" for r in imported)
    df = an.frame(reps)
    assert sorted(df["origin"]) == sorted(["", origin, origin])


def test_a_workloads_figure_names_the_tables_metrics() -> None:
    """A workload's figure may be a store metric (its stored unit converted, its direction the table's) or one of
    the user's own naming: the names and aliases it knows are the table's, and a metric added to the table with a
    figure unit is one a figure may be."""
    from runner.backends.workloads.figures import Figure, figure_config, store_metric, store_metrics

    assert set(store_metrics()) <= set(METRICS) and store_metrics()["throughput"] == "per second"
    assert all(store_metric(alias) == m.name for m in METRICS.values() if m.figure_unit is not None
               for alias in m.aliases)
    assert store_metric("forward") == "forward"  # an alias of a metric no figure may be: the user's own name
    assert figure_config("memory", Figure(regex="m (?P<value>\\d+)", unit="MiB"))["better"] == "lower"
    assert figure_config("accuracy", Figure(regex="a (?P<value>\\d+)"))["better"] == "higher"
    with METRICS.adding(Metric("joules", "energy used", "J", False, figure_unit="J")):
        assert figure_config("joules", Figure(regex="e (?P<value>\\d+)", unit="J"))["stored_unit"] == "J"
    assert figure_config("joules", Figure(regex="e (?P<value>\\d+)", unit="J", better="lower"))["metric"] is None
