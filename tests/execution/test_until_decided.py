"""Repeats until decided, end to end: `matrix run` with the file's `gate:` adds repeats to the cells whose checks
are undecided (interleaved, resumable, within `max`) and stops when each is decided; its summary says what was
decided and what `max` left. Real runs of a small program through the local backend into a real store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runner.base.exitcodes import Exit
from runner.store import Store

SCRIPT = Path(__file__).parent / "scripts" / "steady.py"
MATRIX = f"""
name: until-decided
environments:
  - {{name: a, backend: local, env: {{STEADY_BASE: "100"}}}}
  - {{name: b, backend: local, env: {{STEADY_BASE: "100", STEADY_PHASE: "1.0"}}}}
  - {{name: slow, backend: local, env: {{STEADY_BASE: "70", STEADY_PHASE: "2.0"}}}}
workload:
  argv: ["{{python}}", "{{files}}/steady.py", "{{repeat}}"]
  files: ["{SCRIPT}"]
  parser:
    kind: pattern
    figures:
      throughput: {{regex: 'throughput: ([0-9.]+)', unit: samples/s}}
      window_s: {{regex: 'window: ([0-9.]+) s', unit: s}}
axes: {{model: [steady]}}
gate:
  - {{a: a, b: b, fail_on: "slower:10%"}}
  - {{a: a, b: slow, fail_on: "slower:10%"}}
run: {{repeats: {{min: 3, max: MAX, until: decided}}, interleave: true, timeout: 60}}
"""


def matrix(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def counts(db: Path) -> dict[str, int]:
    with Store(db, readonly=True) as store:
        out: dict[str, int] = {}
        for r in store.rows():
            out[r.environment] = out.get(r.environment, 0) + 1
        return out


def test_a_run_adds_repeats_until_every_check_is_decided(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX.replace("MAX", "12"))
    run = matrix("run", "-m", "m.yaml", "--db", "r.db", cwd=tmp_path)
    out = run.stdout + run.stderr
    # The A/A pair needs more than three repeats a side to be shown within 10%; the slow side fails at once.
    assert run.returncode == Exit.REFERENCE_FAILED, out
    n = counts(tmp_path / "r.db")
    assert n["a"] == n["b"] > 3 and n["a"] <= 12, n
    # Each look (3, 5, 8 and 12 repeats) decides at alpha 0.05 / 4: looking again until something passes would
    # otherwise pass more than it should.
    assert "Until decided: 2 of 2 checks decided (looks at 3, 5, 8, 12 repeats; each decides at alpha 0.0125" in out
    assert n["a"] in (5, 8, 12), n
    assert "Gate passed (slower:10%)" in out and "Gate tripped (slower:10%)" in out, out
    again = matrix("compare", "a", "b", "--db", "r.db", "--fail-on", "slower:10%", cwd=tmp_path)
    assert again.returncode == Exit.OK, again.stdout + again.stderr
    # Three repeats a side alone would not have decided it: the first three of each side are undecided.
    first = matrix("run", "-m", "m.yaml", "--db", "r.db", cwd=tmp_path)
    assert "Nothing to run" in first.stdout + first.stderr and counts(tmp_path / "r.db") == n  # resumed: done


def test_max_leaves_a_check_undecided_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX.replace("MAX", "3").replace('STEADY_BASE: "70"', 'STEADY_BASE: "100"'))
    run = matrix("run", "-m", "m.yaml", "--db", "r.db", cwd=tmp_path)
    out = run.stdout + run.stderr
    assert run.returncode == Exit.UNDECIDED, out
    assert "still undecided at the most repeats (3, `max`)" in out and "repeats a side would decide" in out, out
    assert counts(tmp_path / "r.db") == {"a": 3, "b": 3, "slow": 3}


def test_until_decided_on_the_command_line_and_its_mistakes(tmp_path: Path) -> None:
    text = MATRIX.replace("{min: 3, max: MAX, until: decided}", "3")
    (tmp_path / "m.yaml").write_text(text)
    run = matrix("run", "-m", "m.yaml", "--db", "r.db", "--until-decided", "--max-repeats", "12", cwd=tmp_path)
    assert run.returncode == Exit.REFERENCE_FAILED, run.stdout + run.stderr
    assert counts(tmp_path / "r.db")["a"] > 3
    (tmp_path / "plain.yaml").write_text(text.split("gate:")[0] + "run: {repeats: 3}\n")
    bad = matrix("run", "-m", "plain.yaml", "--db", "p.db", "--until-decided", cwd=tmp_path)
    assert bad.returncode == Exit.USAGE and "no `gate:` and no `references:`" in bad.stderr
    assert bad.stderr.count("\n") == 1
    lone = matrix("run", "-m", "m.yaml", "--db", "r.db", "--max-repeats", "9", cwd=tmp_path)
    assert lone.returncode == Exit.USAGE and "applies with --until-decided only" in lone.stderr
