"""End to end: `matrix run` with the real local backend and PyTorch, then `matrix report` and `matrix compare`."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require

pytestmark = pytest.mark.slow

MATRIX = """
name: e2e-report
environments:
  - {name: cpu-1thread, backend: local, tags: [one], env: {OMP_NUM_THREADS: "1"}}
  - {name: cpu-2threads, backend: local, tags: [two], env: {OMP_NUM_THREADS: "2"}}
axes: {model: [mlp], precision: [fp32, bf16], batch_size: [16, 32], device: [cpu]}
run: {iterations: 5, warmup: 1, repeats: 2, timeout: 300}
"""


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, f"matrix {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_run_then_report_and_compare(tmp_path: Path) -> None:
    require(importlib.util.find_spec("torch") is not None, "PyTorch is not installed in this interpreter")
    (tmp_path / "m.yaml").write_text(MATRIX)
    db = tmp_path / "results.db"
    cli("run", "-m", "m.yaml", "--db", str(db), cwd=tmp_path)

    out = tmp_path / "report"
    listed = cli("report", "--db", str(db), "--format", "md", "--format", "html", "--out", str(out),
                 cwd=tmp_path).stdout
    assert str(out / "report.md") in listed and str(out / "report.html") in listed
    md = (out / "report.md").read_text()
    assert md.startswith("# Benchmark report: e2e-report")
    for heading in ("## The answer", "## Precision grid", "## Environment comparison", "## Precision summary"):
        assert heading in md
    assert "cpu-1thread" in md and "cpu-2threads" in md and "bf16/fp32" in md
    assert "torch 2." in md                        # the versions the environment turned out to have
    recipes = md.split("## How each precision ran", 1)[1].split("\n## ", 1)[0]
    assert "| all fp32 " in recipes and "| all bf16 " in recipes  # what the bench recorded, per environment
    assert "nan" not in md.lower()
    assert (out / "plots" / "throughput.png").stat().st_size > 10_000
    html = (out / "report.html").read_text()
    # the answer, throughput and time (no device memory on CPU), each a Vega-Lite spec drawn in the page
    assert {"answer", "throughput", "iter_time"} <= set(re.findall(r'id="spec-([a-z_]+)"', html))

    compare = cli("compare", "one", "two", "--db", str(db), "--format", "md", cwd=tmp_path).stdout
    assert "# Comparison: one (tag) vs two (tag)" in compare
    pairs_section = compare.split("## Pairs", 1)[1].split("\n## ", 1)[0]
    pair_rows = [ln for ln in pairs_section.splitlines() if ln.startswith("| mlp ")]
    assert len(pair_rows) == 4                     # 2 precisions x 2 batch sizes, paired across the sides
    assert "Geometric mean of two/one over 4 pairs" in compare
    assert "ran differently" not in compare       # the same torch on both sides: the same recipes
