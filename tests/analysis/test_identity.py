"""Whose repeat is it (issue 37): a cell is its definition and its machine. A verdict about this store's sides never
pools or replaces its repeats with an imported machine's; a comparison across machines pairs the same environment and
says so; a machine is named whole. Every store here is made as a team makes them: measured on its own machine,
exported, imported."""

from __future__ import annotations

import gzip
import json
import os
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit
from runner.commands.decide import gate_command
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.publish import publish
from runner.report import compare_command
from tests.store.synthetic import fill_history


def set_id(db: Path, store_id: str) -> None:
    """Give a store the id a store can have (what `matrix import` or a first run writes into meta)."""
    con = sqlite3.connect(db)
    try:
        con.execute("INSERT OR REPLACE INTO meta VALUES ('store_id', ?)", (store_id,))
        con.commit()
    finally:
        con.close()


def measured(db: Path, host: str, envs: list[tuple[str, float]], seed: int, first_run: float = 1.7e9,
             cpu: str = "AMD EPYC", runs: int = 2) -> Path:
    """`envs` measured in this order on one machine: (environment, its throughput level)."""
    for i, (env, level) in enumerate(envs):
        fill_history(db, host, cpu, runs=runs, repeats=4, cells=1, seed=seed * 10 + i, environment=env,
                     step_at=0, step=level / 100.0, first_run=first_run + i * 100)
    return db


def moved(src: Path, into: Path) -> None:
    """Export a store and import the file into another, as `matrix export` and `matrix import` do."""
    out = src.with_suffix(".jsonl.gz")
    export_command(src, out, None, None)
    import_command(into, [out])


@pytest.fixture
def laptop_imported(tmp_path: Path) -> Path:
    """A store that measured `a` and `b` at ~100 img/s, into which a laptop's export is imported: the laptop measured
    only `b`, earlier, at ~50 img/s (the same cell definition)."""
    team = measured(tmp_path / "team.db", "box", [("a", 100.0), ("b", 100.0)], seed=1, first_run=1.8e9)
    laptop = measured(tmp_path / "laptop.db", "laptop", [("b", 50.0)], seed=2, first_run=1.7e9, cpu="Apple M1")
    before = json.loads(compare_command(team, "a", "b", "json"))
    # Four repeats a side at a 2% spread: no change found, and none shown within ±2% either (undecided, not "pass").
    assert before["pairs"][0]["decision"] == "undecided" and 0.97 < before["pairs"][0]["ratio"] < 1.03
    (team.parent / "before.json").write_text(json.dumps(before["pairs"][0]))
    moved(laptop, team)
    return team


def test_an_import_never_changes_a_local_verdict(laptop_imported: Path) -> None:
    before = json.loads((laptop_imported.parent / "before.json").read_text())
    after = json.loads(compare_command(laptop_imported, "a", "b", "json"))
    (pair,) = after["pairs"]
    assert {k: pair[k] for k in ("decision", "ratio", "ratio_low", "ratio_high", "verdict")} == \
        {k: before[k] for k in ("decision", "ratio", "ratio_low", "ratio_high", "verdict")}, pair
    assert [m["hosts"] for m in after["machines"]["b"]] == [["box"]] and not after["across_machines"]
    assert any("laptop" in n and "left out" in n for n in after["notes"]), after["notes"]
    # The gate at 10%: the interval of the change lies inside it, a pass earned on the local repeats alone.
    text, status = gate_command(laptop_imported, "a", "b", ["slower:10%"], None)
    assert status is Exit.OK, text


def test_the_laptops_side_is_asked_for_by_name_and_said_to_be_another_machine(laptop_imported: Path) -> None:
    laptop_id = store_of(laptop_imported.parent / "laptop.jsonl.gz")
    out = json.loads(compare_command(laptop_imported, "a", f"b@machine:{laptop_id}", "json"))
    (pair,) = out["pairs"]
    assert pair["decision"] == "fail" and 0.45 < pair["ratio"] < 0.55
    assert out["across_machines"] and out["machines"]["b"][0]["imported_from"][0].endswith("laptop.jsonl.gz")
    md = compare_command(laptop_imported, "a", f"b@machine:{laptop_id}", "md")
    assert "**The sides ran on different machines, different hardware (AMD EPYC (2 CPUs) against Apple M1" in md
    assert re.search(rf"machine:{laptop_id} \(host laptop; Apple M1 \(2 CPUs\); measured 2023-11-14 – 2023-11-15; "
                     r"imported from \S*laptop\.jsonl\.gz on \d{4}-\d\d-\d\d\)", md), md


def store_of(file: Path) -> str:
    """The id of the store that exported a file (its header's source)."""
    return str(json.loads(gzip.decompress(file.read_bytes()).splitlines()[0])["source"]["store"])


def test_a_side_measured_only_elsewhere_takes_that_machine_and_several_are_refused(tmp_path: Path) -> None:
    team = measured(tmp_path / "team.db", "box", [("a", 100.0)], seed=1, first_run=1.8e9)
    one = measured(tmp_path / "one.db", "one", [("c", 100.0)], seed=2)
    moved(one, team)
    out = json.loads(compare_command(team, "a", "c", "json"))
    assert out["pairs"][0]["decision"] != "fail" and out["machines"]["b"][0]["hosts"] == ["one"]
    two = measured(tmp_path / "two.db", "two", [("c", 50.0)], seed=3)
    moved(two, team)
    with pytest.raises(ConfigError, match=r"'c' was measured on 2 machines, none of them this store: machine:\S+ "
                                          r"\(host (one|two);.*; machine:\S+ \(host (one|two);.*name one, e\.g\. "
                                          r"c@machine:") as refused:
        compare_command(team, "a", "c", "json")
    assert "host one" in str(refused.value) and "host two" in str(refused.value) and "\n" not in str(refused.value)


@pytest.fixture
def twins(tmp_path: Path) -> Path:
    """Two identical machines that each measured `container` (~50) and `metal` (~100), in opposite orders, pooled
    into a third store by import."""
    box1 = measured(tmp_path / "box1.db", "box1", [("container", 50.0), ("metal", 100.0)], seed=1)
    box2 = measured(tmp_path / "box2.db", "box2", [("metal", 100.0), ("container", 50.0)], seed=2, first_run=1.7e9 + 7)
    for src in (box1, box2):
        moved(src, tmp_path / "team.db")
    return tmp_path / "team.db"


def test_two_machines_pair_the_same_environment(twins: Path, tmp_path: Path) -> None:
    out = json.loads(compare_command(twins, "host:box1", "host:box2", "json"))
    assert sorted(p["environment"] for p in out["pairs"]) == ["container", "metal"]
    assert all(0.95 < p["ratio"] < 1.05 and p["decision"] != "fail" for p in out["pairs"]), out["pairs"]
    assert out["paired_on"][0] == "environment" and out["across_machines"]
    text, status = gate_command(twins, "host:box1", "host:box2", ["slower:10%"], "json")
    assert status is Exit.OK and {c["environment"] for c in json.loads(text)["checks"]} == {"container", "metal"}
    publish([twins], tmp_path / "site")
    page = (tmp_path / "site" / "machines.html").read_text()
    assert "2.00x" not in page and page.count("<td>container</td>") == 1 and page.count("<td>metal</td>") == 1


def test_a_machine_with_several_environments_is_not_paired_on_params_alone(twins: Path) -> None:
    """Against one of its environments, a machine of several pairs that environment with itself (its others unpaired);
    against an environment it does not hold, it is refused: the params alone would choose one of its environments."""
    out = json.loads(compare_command(twins, "host:box1", "container@host:box2", "json"))
    assert out["paired_on"][0] == "environment"
    assert [(p["environment"], p["a_environments"], p["b_environments"]) for p in out["pairs"]] == \
        [("container", "container", "container")]
    assert 0.95 < out["pairs"][0]["ratio"] < 1.05
    assert [(u["side"], u["environment"]) for u in out["unpaired"]] == [("A", "metal")]
    out = json.loads(compare_command(twins, "metal@host:box1", "container@host:box2", "json"))
    assert 0.45 < out["pairs"][0]["ratio"] < 0.55


def test_a_machine_id_is_matched_whole(tmp_path: Path, matrix_cmd: list[str]) -> None:
    """A store id that is another's prefix (legal: `<id>-x`) never joins its side; a prefix names no machine."""
    a = measured(tmp_path / "a.db", "alpha", [("local-cpu", 100.0)], seed=1)
    b = measured(tmp_path / "b.db", "beta", [("local-cpu", 100.0)], seed=2, first_run=1.7e9 + 5)
    set_id(a, "abcd1234")
    set_id(b, "abcd1234-x")
    for src in (a, b):
        moved(src, tmp_path / "team.db")
    team = tmp_path / "team.db"
    out = json.loads(compare_command(team, "machine:abcd1234", "machine:abcd1234-x", "json"))
    assert [m["id"] for m in out["machines"]["a"]] == ["abcd1234"]
    assert out["pairs"][0]["decision"] != "fail" and 0.95 < out["pairs"][0]["ratio"] < 1.05
    with pytest.raises(ConfigError, match=r"'machine:abcd' matches no machine in the store \(a store id or a hardware "
                                          r"name, written whole\); machines: machine:abcd1234 \(host alpha"):
        compare_command(team, "machine:abcd", "machine:abcd1234-x", "json")
    site = subprocess.run([*matrix_cmd, "publish", "--db", str(team), "-o", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert site.returncode == 0, site.stderr
    assert "2.00x" not in (tmp_path / "site" / "machines.html").read_text()


def test_a_host_or_hardware_that_names_two_machines_is_refused(twins: Path) -> None:
    with pytest.raises(ConfigError, match=r"'machine:AMD EPYC \(2 CPUs\)' names 2 machines: machine:\S+ \(host box1;"):
        compare_command(twins, "machine:AMD EPYC (2 CPUs)", "host:box1", "json")


def test_the_report_says_where_each_machines_repeats_came_from(laptop_imported: Path, tmp_path: Path) -> None:
    from runner.report import report_command

    written = report_command(laptop_imported, formats=["md"], out=tmp_path / "report")
    text = next(p for p in written if p.name == "report.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| from "))
    assert "this store" in row and "imported from" in row and "laptop.jsonl.gz" in row
    assert "Where each machine's results came from:" in text


def test_ls_imports_lists_each_file_and_origin(laptop_imported: Path, matrix_cmd: list[str]) -> None:
    laptop_id = store_of(laptop_imported.parent / "laptop.jsonl.gz")
    proc = subprocess.run([*matrix_cmd, "ls", "--imports", "--db", str(laptop_imported)], capture_output=True,
                          text=True, timeout=120, check=False, env={**os.environ, "COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    (row,) = [line for line in proc.stdout.splitlines() if laptop_id in line]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:3] == [laptop_id, "laptop", "Apple M1 (2 CPUs)"] and cells[-2:] == ["2", "8"]
    assert cells[5].endswith("laptop.jsonl.gz")
    own = measured(laptop_imported.parent / "own.db", "own", [("a", 100.0)], seed=9)
    alone = subprocess.run([*matrix_cmd, "ls", "--imports", "--db", str(own)], capture_output=True, text=True,
                           timeout=120, check=False)
    assert alone.returncode == 0 and "imported nothing" in alone.stdout
