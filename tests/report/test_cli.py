"""`matrix compare` and `matrix report` as a user runs them, on the fixture store."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from runner.base.errors import MatrixError
from runner.report import compare_command, report_command


def matrix(cmd: list[str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=None, check=False)


@pytest.fixture(autouse=True)
def _cli_ready(matrix_cmd: list[str]) -> None:
    if not (Path(__file__).resolve().parents[2] / "runner" / "cli" / "__init__.py").exists():
        pytest.skip("runner/cli/__init__.py not there yet")


def test_compare_terminal_table(matrix_cmd: list[str], db: Path) -> None:
    proc = matrix(matrix_cmd, "compare", "container", "slurm", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out                                # no colour codes when not on a terminal
    assert "container (tag) vs slurm (tag)" in out
    assert "1.08x slower (1.05–1.10)" in out and "same (within ±2%)" in out
    assert "not significant" not in out and "undecided: the interval reaches beyond ±2%" in out
    assert "Geometric mean of slurm/container over 7 of 8 pairs (1 not measured on both sides): 0.96x (1.04x slower)" in out
    assert "Unpaired cells" in out and "amp-bf16" in out


def test_compare_formats(matrix_cmd: list[str], db: Path) -> None:
    md = matrix(matrix_cmd, "compare", "ngc-18.07", "cluster-pt041", "--db", str(db), "--format", "md")
    assert md.returncode == 0 and md.stdout.startswith("# Comparison: ngc-18.07 (env) vs cluster-pt041 (env)")
    assert not md.stdout.endswith("\n\n")
    js = matrix(matrix_cmd, "compare", "ngc-18.07", "cluster-pt041", "--db", str(db), "--format", "json",
                "--min-effect", "0.1")
    doc = json.loads(js.stdout)
    assert doc["test"]["min_effect"] == 0.1
    assert doc["significant"] == 1  # no change reaches 10%; the OOM on one side is a regression at any threshold
    csv = compare_command(db, "ngc-18.07", "cluster-pt041", "csv")
    assert csv.splitlines()[0].startswith("model,precision,batch_size,dataset,gpus,nodes,options,a_n,")
    assert len(csv.splitlines()) == 1 + 8


def test_compare_unknown_side_is_one_line_that_lists_the_sides(matrix_cmd: list[str], db: Path) -> None:
    proc = matrix(matrix_cmd, "compare", "ngc-99.99", "slurm", "--db", str(db))
    assert proc.returncode == 2  # a usage error (exitcodes.Exit.USAGE), not a failed decision
    assert "Traceback" not in proc.stderr
    assert "'ngc-99.99' matches no result" in proc.stderr and "cluster-pt041" in proc.stderr
    assert "container" in proc.stderr


def test_compare_unknown_metric(db: Path) -> None:
    with pytest.raises(MatrixError, match="unknown metric 'speed'.*throughput"):
        compare_command(db, "container", "slurm", None, "speed")


def test_report_writes_every_format(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = matrix(matrix_cmd, "report", "--db", str(db), "--format", "md", "--format", "html", "--format", "csv",
                  "--format", "json", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    listed = {Path(p).name for p in proc.stdout.split()}
    assert {"report.md", "report.html", "summary.csv", "repeats.csv", "report.json", "throughput.png"} <= listed
    assert json.loads((out / "report.json").read_text())["name"] == "seeds"


def test_report_default_folder_is_named_after_the_matrix(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    proc = matrix(matrix_cmd, "report", "--db", str(db.resolve()), "--run", "20240106", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "results" / "reports" / "seeds" / "report.md").read_text()
    assert (tmp_path / "results" / "reports" / "seeds" / "report.html").exists()
    assert not (tmp_path / "reports").exists(), "the tracked reports/ is for reports committed on purpose"
    assert "cluster-pt041" in md and "ngc-18.07" not in md     # only the chosen run


def test_report_errors(matrix_cmd: list[str], db: Path, tmp_path: Path) -> None:
    bad_format = matrix(matrix_cmd, "report", "--db", str(db), "--format", "pdf", "--out", str(tmp_path))
    assert bad_format.returncode == 2 and "unknown report format 'pdf'" in bad_format.stderr
    with pytest.raises(MatrixError, match="no result store"):
        report_command(tmp_path / "none.db")
    with pytest.raises(MatrixError, match="'1999' not found"):
        report_command(db, ["1999"])


def test_gate_command_exit_statuses_and_the_undecided_policy(db: Path) -> None:
    """On the fixture (GPU numbers, 3 repeats a cell; three cells of A have no partner in B): the OOM on B fails
    slower; the cells B never measured are undecided, never dropped; an unknown policy is one line."""
    from runner.base.exitcodes import Exit
    from runner.commands.decide import gate_command

    text, status = gate_command(db, "ngc-18.07", "cluster-pt041", ["slower:50%"], "json")
    doc = json.loads(text)
    assert status is Exit.FAILED and doc["verdict"] == "fail" and doc["counts"]["undecided"] == 3
    assert [c["reason"] for c in doc["checks"] if c["verdict"] == "fail"] == ["regression: B 3 oom (A 3 ok)"]
    assert {c["reason"] for c in doc["checks"] if c["verdict"] == "undecided"} == {
        "not measured on B (no repeat of this cell)"}
    text, status = gate_command(db, "ngc-18.07", "cluster-pt041", ["faster:50%"], None)
    assert status is Exit.UNDECIDED and "Gate undecided (faster:50%): 8 passed, 3 undecided of 11 checks" in text
    text, status = gate_command(db, "ngc-18.07", "cluster-pt041", ["faster:50%"], None, "pass")
    assert status is Exit.OK and "Gate passed (faster:50%), with 3 undecided counted as passed" in text
    with pytest.raises(MatrixError, match="--undecided 'maybe': allowed: error, fail, pass"):
        gate_command(db, "ngc-18.07", "cluster-pt041", ["slower:3%"], None, "maybe")
