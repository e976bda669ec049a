"""Report views as plugins (runner/report/viewkit.py): the machines view over a store pooled from two machines,
and a view added the documented way (its module, and its line in runner/report/viewset/__init__.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.report import report_command, viewset
from runner.report.fmt import Section, Table, TableCell
from runner.report.viewkit import Built, Context, View
from tests.store.synthetic import fill_history


def pooled(tmp: Path, cpu_a: str, cpu_b: str, definitions: dict | None = None) -> Path:
    """Two machines' stores (the same environment and cells; B 1.5x faster), exported and imported into one."""
    a = fill_history(tmp / "a.db", "alpha", cpu_a, runs=1, repeats=3, cells=6, seed=3, definitions=definitions)
    b = fill_history(tmp / "b.db", "beta", cpu_b, runs=1, repeats=3, cells=6, seed=3, first_run=1.7e9 + 9,
                     step_at=0, step=1.5, definitions=definitions)
    export_command(a, tmp / "a.jsonl.gz", None, None)
    export_command(b, tmp / "b.jsonl.gz", None, None)
    import_command(tmp / "c.db", [tmp / "a.jsonl.gz", tmp / "b.jsonl.gz"])
    return tmp / "c.db"


def section(md: str, heading: str) -> str:
    return md.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def test_machines_side_by_side(tmp_path: Path) -> None:
    # A throughput of its own definition: the table says the unit it was measured in, never img/s.
    db = pooled(tmp_path, "AMD EPYC", "Intel Xeon", {"throughput": {"how": "tokens over the window", "unit": "tok/s"}})
    out = tmp_path / "report"
    report_command(db, None, ["md", "json", "html"], out)
    md = (out / "report.md").read_text()
    machines = section(md, "Machines side by side")
    header = machines.splitlines()[1]
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols == ["model", "precision", "metric", *(f"{m} (2 CPUs) · batch {b}" for m in ("AMD EPYC", "Intel Xeon")
                                                      for b in (32, 64, 128))]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in machines.splitlines()[3:] if
            line.startswith("|")]
    assert [r[:3] for r in rows] == [["resnet50", "fp32", "throughput (tok/s)"], ["", "", "time/iter (ms)"],
                                     ["resnet50", "amp", "throughput (tok/s)"], ["", "", "time/iter (ms)"]]
    fp32 = [float(c.split(" ± ")[0].replace(",", "")) for c in rows[0][3:]]
    assert all(1.4 < b / a < 1.6 for a, b in zip(fp32[:3], fp32[3:], strict=True))  # B measured 1.5x A
    # One environment measured on two machines is two cells per name, never an older and a newer definition.
    assert "### local-cpu · AMD EPYC (2 CPUs) · resnet50 · synthetic\n" in md  # the machine named once
    assert "36 repeats in 12 cells, 2 environments: 36 ok." in md
    environments = section(md, "Environments").splitlines()
    assert [c.strip() for c in environments[3].strip("|").split("|")] == ["machine", "AMD EPYC (2 CPUs)",
                                                                          "Intel Xeon (2 CPUs)"]
    assert "local-cpu · AMD EPYC (2 CPUs)" in environments[1]
    doc = json.loads((out / "report.json").read_text())
    assert sorted({r["machine"] for r in doc["machines"]}) == ["AMD EPYC (2 CPUs)", "Intel Xeon (2 CPUs)"]
    html = (out / "report.html").read_text()
    assert '<a href="#machines">Machines</a>' in html and '<section id="machines">' in html


def test_the_same_hardware_on_two_machines_is_told_apart_by_its_store(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report_command(pooled(tmp_path, "AMD EPYC", "AMD EPYC"), None, ["md"], out)
    header = section((out / "report.md").read_text(), "Machines side by side").splitlines()[1]
    labels = {c.strip().split(" · ")[0] for c in header.strip("|").split("|")[3:]}
    assert len(labels) == 2 and all(label.startswith("AMD EPYC (2 CPUs) @") for label in labels)


def test_one_machine_has_no_machines_view_nor_row(tmp_path: Path) -> None:
    out = tmp_path / "report"
    report_command(fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=1, repeats=2, cells=3), None,
                   ["md", "json"], out)
    md = (out / "report.md").read_text()
    assert "## Machines side by side" not in md and "| machine |" not in md
    assert json.loads((out / "report.json").read_text())["machines"] == []


class Busiest(View):
    """A toy view: the cell with the most repeats, placed between the comparison and the precision summary."""

    name = "busiest"
    order = 15
    heading = "Busiest cell"

    def build(self, ctx: Context) -> Built:
        top = ctx.summary.sort_values("n", ascending=False, kind="stable").head(1)
        table = Table(["model", "repeats"])
        for r in top.to_dict("records"):
            table.add(TableCell(str(r["model"]), "key"), TableCell(str(r["n"]), "num"))
        return Built(self, [Section("Most repeats", table, "The cell measured most often.")], top[["model", "n"]])


def test_a_view_added_the_documented_way_shows_in_every_format(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(viewset, "VIEWS", sorted([*viewset.VIEWS, Busiest()], key=lambda v: v.order))
    out = tmp_path / "report"
    report_command(fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=1, repeats=2, cells=3), None,
                   ["md", "json", "html"], out)
    md = (out / "report.md").read_text()
    assert "## Busiest cell\n\n### Most repeats\n\n| model    | repeats |\n" in md
    assert "The cell measured most often." in section(md, "Busiest cell")
    html = (out / "report.html").read_text()
    assert '<a href="#busiest">Busiest cell</a>' in html and '<section id="busiest">' in html
    doc = json.loads((out / "report.json").read_text())
    assert doc["busiest"] == [{"model": "resnet50", "n": 2}]
    keys = list(doc)
    assert keys.index("comparisons") < keys.index("busiest") < keys.index("precision_summary")


def test_one_environment_on_two_machines_is_two_cells_not_two_definitions(tmp_path: Path) -> None:
    """The same environment and params from two machines' stores: both machines' repeats are in the tables (the
    report used to keep the newest store's and count the other's as an older definition, not shown)."""
    out = tmp_path / "report"
    report_command(pooled(tmp_path, "AMD EPYC", "Intel Xeon"), None, ["json"], out)
    doc = json.loads((out / "report.json").read_text())
    assert doc["definitions"] == []
    assert sorted(c["environment"] for c in doc["cells"] if c["batch_size"] == 32 and c["precision"] == "fp32") == [
        "local-cpu · AMD EPYC (2 CPUs)", "local-cpu · Intel Xeon (2 CPUs)"]
