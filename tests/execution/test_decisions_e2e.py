"""End to end with the real local backend and real PyTorch: references, adaptive repeats, the gate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runner.base.exitcodes import Exit
from runner.store import Store

CELLS = """
name: refs
environments: [{{name: cpu, backend: local, env: {{OMP_NUM_THREADS: "1"}}}}]
axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu]}}
run: {{iterations: 3, warmup: 1, repeats: {repeats}, timeout: 300}}
"""


def cli(*args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_reference_set_right_passes_and_one_set_too_high_fails(tmp_path: Path) -> None:
    right = write(tmp_path / "right.yaml", CELLS.format(repeats=2) + """
references:
  - match: {model: mnist_cnn}
    throughput: ">= 1"
    iter_time: "<= 60000"   # ms
""")
    high = write(tmp_path / "high.yaml", CELLS.format(repeats=2) + """
references:
  - {throughput: ">= 10000000"}
""")
    run = cli("run", "-m", str(right), "--db", "r.db", cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "References met: 2 passed" in run.stdout and ">= 1" in run.stdout
    # The same cells (same keys): nothing is measured again, the verdict comes from the store.
    again = cli("run", "-m", str(high), "--db", "r.db", cwd=tmp_path)
    assert again.returncode == 4, again.stdout + again.stderr  # measured, but a reference failed
    assert "Nothing to run" in again.stdout and "References NOT met: 1 failed" in again.stdout
    assert "-100.0%" in again.stdout  # the margin: nowhere near ten million img/s
    check = cli("check", "-m", str(high), "--db", "r.db", "--format", "json", cwd=tmp_path)
    assert check.returncode == 1
    doc = json.loads(check.stdout)
    (verdict,) = doc["verdicts"]
    assert doc["passed"] is False and verdict["verdict"] == "fail" and verdict["n"] == 2
    assert 0 < verdict["measured"] < 10_000_000 and verdict["expected"] == ">= 1e+07"
    ok = cli("check", "-m", str(right), "--db", "r.db", cwd=tmp_path)
    assert ok.returncode == 0 and ok.stdout.count("pass") >= 2, ok.stdout + ok.stderr
    empty = cli("check", "-m", str(right), "--db", "other.db", cwd=tmp_path)
    assert empty.returncode == 6 and "no result store" in empty.stderr  # a store error (exitcodes.Exit.STORE)


def test_one_repeat_and_an_unmeasured_metric_are_undecided_never_passed(tmp_path: Path) -> None:
    """`repeats: 1` gives Welch no p-value and a CPU measures no peak memory: the gate, the references and
    `matrix run` say undecided and exit 5, unless --undecided (or the entry's `undecided:`) says otherwise."""
    m = write(tmp_path / "one.yaml", CELLS.format(repeats=1) + """
references:
  - {match: {model: mnist_cnn}, memory: "<= 100000"}
""")
    run = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    assert run.returncode == 5, run.stdout + run.stderr
    assert "References undecided: 1 undecided" in run.stdout and "peak_mem not measured" in run.stdout
    counted = write(tmp_path / "counted.yaml", CELLS.format(repeats=1) + """
references:
  - {match: {model: mnist_cnn}, memory: "<= 100000", undecided: pass}
""")
    again = cli("run", "-m", str(counted), "--db", "r.db", cwd=tmp_path)
    assert again.returncode == 0 and "undecided counted as passed" in again.stdout, again.stdout + again.stderr
    check = cli("check", "-m", str(m), "--db", "r.db", "--undecided", "pass", cwd=tmp_path)
    assert check.returncode == 0 and "1 undecided" in check.stdout, check.stdout + check.stderr
    assert cli("check", "-m", str(m), "--db", "r.db", cwd=tmp_path).returncode == 5
    assert cli("check", "-m", str(m), "--db", "r.db", "--undecided", "fail", cwd=tmp_path).returncode == 1
    # The same cell measured again (--force): two runs of one repeat each, compared by run id.
    assert cli("run", "-m", str(counted), "--db", "r.db", "--force", cwd=tmp_path).returncode == 0
    with Store(tmp_path / "r.db", create=False) as store:
        first, second = (r.run_id for r in store.runs()[:2])
    gate = cli("compare", first, second, "--db", "r.db", "--fail-on", "slower:3%", cwd=tmp_path)
    assert gate.returncode == 5, gate.stdout + gate.stderr
    assert "Gate undecided (slower:3%): 1 undecided of 1 check over 1 pair" in gate.stdout
    assert "Gate passed" not in gate.stdout and "a test needs 2+ per side" in gate.stdout
    passed = cli("compare", first, second, "--db", "r.db", "--fail-on", "slower:3%", "--undecided", "pass",
                 "--format", "json", cwd=tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    doc = json.loads(passed.stdout)
    assert doc["gate"]["verdict"] == "undecided" and doc["gate"]["undecided_policy"] == "pass"
    assert doc["pairs"][0]["decision"] == "undecided" and doc["pairs"][0]["verdict"].startswith("undecided")
    failing = cli("compare", first, second, "--db", "r.db", "--fail-on", "slower:3%", "--undecided", "fail",
                  cwd=tmp_path)
    assert failing.returncode == 1 and "counted as failed" in failing.stdout


def test_adaptive_repeats_stop_at_max_and_resume_counts_stored_repeats(tmp_path: Path) -> None:
    fixed = write(tmp_path / "fixed.yaml", CELLS.format(repeats=2))
    assert cli("run", "-m", str(fixed), "--db", "r.db", cwd=tmp_path).returncode == 0
    # A target no CPU run reaches: the cell gets repeats up to max, the two stored ones count.
    adaptive = write(tmp_path / "adaptive.yaml", CELLS.format(repeats="{min: 2, max: 4, target_ci: 0.01%}"))
    run = cli("run", "-m", str(adaptive), "--db", "r.db", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    with Store(tmp_path / "r.db", create=False) as store:
        repeats = sorted(r.repeat for r in store.rows())
    assert repeats == [0, 1, 2, 3]
    assert "max (4) reached" in run.stdout and "reached max repeats" in run.stdout
    again = cli("run", "-m", str(adaptive), "--db", "r.db", cwd=tmp_path)
    assert "Nothing to run" in again.stdout and again.returncode == 0


GATE = Path(__file__).parents[2] / "examples" / "gate.yaml"  # one, one-again, and no-simd (slower on purpose)


def test_the_gate_trips_on_a_real_slowdown_and_stays_quiet_on_a_a(tmp_path: Path) -> None:
    run = cli("run", "-m", str(GATE), "--db", "g.db", cwd=tmp_path)
    # The file's gate: no-simd trips slower:3% (exit 4, everything measured); its verdicts follow the summary.
    assert run.returncode == Exit.REFERENCE_FAILED, run.stdout + run.stderr
    assert "no-simd against one: Gate tripped (slower:3%)" in run.stdout
    slow = cli("compare", "one", "no-simd", "--db", "g.db", "--fail-on", "slower:3%", cwd=tmp_path)
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert "Gate tripped (slower:3%)" in slow.stdout and "slower by" in slow.stdout
    # A/A: the same environment twice, its repeats interleaved with the other's, so drift in the machine's
    # load falls on both. It never trips; it passes only where the interval of the change lies inside 20%, which
    # five repeats of a shared 2-vCPU VM (10-40% spread) often cannot show: then it is undecided and says how many
    # repeats a side would decide it (examples/gate.yaml; the rates are in docs/statistics.md).
    same = cli("compare", "one", "one-again", "--db", "g.db", "--fail-on", "slower:20%", cwd=tmp_path)
    assert same.returncode in (Exit.OK, Exit.UNDECIDED), same.stdout + same.stderr
    if same.returncode == Exit.OK:
        # Passed only because the slower end of the change's interval lies inside 20%.
        assert "Gate passed (slower:20%)" in same.stdout
        doc = json.loads(cli("compare", "one", "one-again", "--db", "g.db", "--fail-on", "slower:20%", "--format",
                             "json", cwd=tmp_path).stdout)
        (check,) = doc["gate"]["checks"]
        assert check["verdict"] == "pass" and check["change_high"] < 0.20, check
    else:
        assert "Gate undecided" in same.stdout and "repeats a side would decide" in same.stdout
    doc = json.loads(cli("compare", "one", "no-simd", "--db", "g.db", "--fail-on", "slower:3%,memory:50%",
                         "--format", "json", cwd=tmp_path).stdout)
    assert doc["gate"]["tripped"] is True and doc["gate"]["rules"] == ["slower:3%", "memory:50%"]
    assert [c["rule"] for c in doc["gate"]["checks"] if c["tripped"]] == ["slower:3%"]
    assert "\x1b[" not in slow.stdout  # no colour when not a terminal
    bad = cli("compare", "one", "no-simd", "--db", "g.db", "--fail-on", "slow:3%", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--fail-on 'slow:3%'" in bad.stderr
