"""GPU telemetry in the store's readers: throttled repeats marked in `matrix show`, compare and the report;
images per joule a metric like any other (compare --metric, the gate's energy rule, references). The
results are the report fixtures with telemetry added as bench writes it (no GPU needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner import analysis as an
from runner.analysis import gate, references
from runner.analysis.verdict import Verdict
from runner.report import compare_command, report_command
from tests.report.conftest import fill_store, load_results

THROTTLED = {"sm_clock_mhz": {"min": 1410, "median": 1700, "max": 1980}, "throttled": True,
             "throttle_reason": "clock-event reasons SwThermalSlowdown", "source": "nvml"}
COOL = {"sm_clock_mhz": {"min": 1965, "median": 1980, "max": 1980}, "throttled": False, "source": "nvml"}


def with_telemetry(data: dict[str, Any], env: str, model: str, precision: str, batch: int,
                   throttled_repeats: int, ipj: list[float] | None = None) -> None:
    rows = [r for r in data["results"] if r["environment"] == env and r["params"]["model"] == model
            and r["params"]["precision"] == precision and r["params"]["batch_size"] == batch and r["status"] == "ok"]
    assert rows
    for i, r in enumerate(rows):
        r["metrics"]["telemetry"] = dict(THROTTLED if i < throttled_repeats else COOL)
        if ipj is not None:
            r["metrics"]["images_per_joule"] = ipj[i % len(ipj)]
            r["metrics"]["energy_j"] = r["metrics"]["images"] / ipj[i % len(ipj)]


@pytest.fixture
def hot_db(tmp_path: Path) -> Path:
    data = load_results()
    # the significant 1.08x slower pair of the golden comparison, throttled on B in 2 of its 3 repeats
    with_telemetry(data, "cluster-pt041", "cifar_vgg16", "fp16", 128, 2)
    with_telemetry(data, "ngc-18.07", "cifar_vgg16", "fp16", 128, 0)
    with_telemetry(data, "ngc-18.07", "resnet50", "amp", 64, 0, ipj=[6.0, 6.1, 5.9])
    with_telemetry(data, "cluster-pt041", "resnet50", "amp", 64, 0, ipj=[5.0, 5.1, 4.9])
    return fill_store(tmp_path / "results.db", data)


def test_frame_reads_throttled_and_images_per_joule(hot_db: Path) -> None:
    from runner.report import load
    df, _, _ = load(hot_db)
    hot = df[df["throttled"]]
    assert len(hot) == 2 and set(hot["environment"]) == {"cluster-pt041"}
    assert df["images_per_joule"].notna().sum() == 6
    assert an.get_metric("energy").name == "images_per_joule"


def test_compare_says_when_a_difference_coincides_with_throttling(hot_db: Path) -> None:
    md = compare_command(hot_db, "ngc-18.07", "cluster-pt041", "md")
    row = next(line for line in md.splitlines() if line.startswith("| cifar_vgg16") and "| fp16 " in line)
    assert "slower (coincides with throttling: B throttled in 2 of 3)" in row
    assert "1 significant difference coincides with throttling" in md
    doc = json.loads(compare_command(hot_db, "ngc-18.07", "cluster-pt041", "json"))
    pair = next(p for p in doc["pairs"] if p["model"] == "cifar_vgg16" and p["precision"] == "fp16")
    assert pair["b_throttled"] == 2 and pair["a_throttled"] == 0 and pair["throttling"].startswith("coincides")
    quiet = next(p for p in doc["pairs"] if p["model"] == "resnet50" and p["precision"] == "fp32"
                 and p["batch_size"] == 64)
    assert quiet["throttling"] == "" and quiet["b_throttled"] == 0


def test_compare_images_per_joule(hot_db: Path) -> None:
    doc = json.loads(compare_command(hot_db, "ngc-18.07", "cluster-pt041", "json", metric="energy"))
    assert doc["metric"] == "images_per_joule" and doc["unit"] == "img/J"
    pair = next(p for p in doc["pairs"] if p["model"] == "resnet50" and p["precision"] == "amp"
                and p["batch_size"] == 64)
    assert pair["ratio"] == pytest.approx(5.0 / 6.0) and pair["verdict"] == "less efficient"
    unmeasured = [p for p in doc["pairs"] if p["model"] == "cifar_vgg16"]
    assert all(p["decision"] == "undecided" for p in unmeasured)  # no energy there: never "not significant"


def test_the_gate_has_an_energy_rule(hot_db: Path) -> None:
    from runner.report import load
    df, _, _ = load(hot_db)
    a, b = an.latest(df[df["environment"] == "ngc-18.07"]), an.latest(df[df["environment"] == "cluster-pt041"])
    rules = gate.parse_rules(["energy:5%"])
    assert rules[0].metric == "images_per_joule"
    checks = gate.evaluate(a, b, rules)
    amp = next(c for c in checks if c.params["model"] == "resnet50" and c.params["precision"] == "amp"
               and c.params["batch_size"] == 64)
    assert amp.verdict is Verdict.FAIL and amp.change == pytest.approx(0.2)
    others = [c for c in checks if c is not amp and c.a_n and c.b_n]
    assert not others  # every other pair has no energy: undecided, not passed
    assert all(c.verdict is Verdict.UNDECIDED for c in checks if c is not amp and not c.reason.startswith("regression: B"))
    reversed_checks = gate.evaluate(b, a, rules)
    amp_rev = next(c for c in reversed_checks if c.params["precision"] == "amp" and c.params["batch_size"] == 64
                   and c.params["model"] == "resnet50")
    assert amp_rev.verdict is Verdict.PASS  # more images per joule is not a regression


def test_references_take_images_per_joule() -> None:
    refs = references.parse([{"match": {"model": "resnet50"}, "energy": ">= 5.5"},
                             {"match": {"model": "resnet50"}, "images_per_joule": "6 ± 5%"}], lambda p: str(p))
    assert [list(r.bounds) for r in refs] == [["images_per_joule"], ["images_per_joule"]]


def test_report_marks_throttled_cells_and_shows_energy(hot_db: Path, tmp_path: Path) -> None:
    report_command(hot_db, None, ["md", "json"], tmp_path / "r")
    md = (tmp_path / "r" / "report.md").read_text()
    assert "(2 throttled)" in md  # the grid cell of the throttled repeats
    assert "the GPU throttled in some ok repeats" in md
    assert "energy efficiency (img/J)" in md
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    cell = next(c for c in doc["cells"] if c["environment"] == "cluster-pt041" and c["model"] == "cifar_vgg16"
                and c["precision"] == "fp16")
    assert cell["throttled"] == 2
    assert any(f["flag"] == "throttled" for f in doc["flags"])
    assert doc["units"]["images_per_joule"] == "img/J"


def test_show_marks_a_throttled_repeat(hot_db: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "runner.cli", "show", "--db", str(hot_db)], capture_output=True,
                         text=True, timeout=120, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    assert "throttled:" in out.stdout  # the note column of the two throttled repeats
    assert out.stdout.count("throttled:") == 2
