"""Real workload runs on this host through the CLI: a script logging through the real mlperf-logging, a
DLLogger-format script, a script measuring itself with matrix_bench.measure, a pattern whose figure is
not in the output; argv values with spaces and shell metacharacters reach the program verbatim; compare
pairs the workload's cells like bench's."""

from __future__ import annotations

import json
from pathlib import Path

from tests.backends.workloads.conftest import EXAMPLES, SCRIPTS, WEIRD, cli, received_argv, rows

TRAIN = ('["{python}", "{files}/mlperf_train.py", "--batch-size", "{batch_size}", "--epochs", "3", '
         '"--steps", "5", "--label", "{label}"]')

COMPARE = f"""
name: wl-local
environments:
  - {{name: mllog-a, backend: local, env: {{OMP_NUM_THREADS: "1"}}}}
  - {{name: mllog-b, backend: local, env: {{OMP_NUM_THREADS: "1", UNUSED: "b"}}}}
workload:
  argv: {TRAIN}
  files: ["{SCRIPTS / 'mlperf_train.py'}"]
  parser: mllog
axes:
  batch_size: [16]
  label: [{json.dumps(WEIRD)}]
run: {{repeats: 2, timeout: 180}}
"""

KINDS = f"""
name: wl-kinds
environments:
  - name: dllogger
    backend: local
    workload:
      argv: ["{{python}}", "{{files}}/train_dllogger.py", "--batch-size", "{{batch_size}}", "--epochs", "2",
             "--steps", "4", "--log-file", "{{output}}/dll.json"]
      files: ["{EXAMPLES / 'train_dllogger.py'}", "{EXAMPLES / 'tiny.py'}"]
      parser: {{kind: dllogger, file: "{{output}}/dll.json"}}
  - name: measured
    backend: local
    workload:
      argv: ["{{python}}", "{{files}}/train_measure.py", "--batch-size", "{{batch_size}}", "--epochs", "2", "--steps", "4"]
      files: ["{EXAMPLES / 'train_measure.py'}", "{EXAMPLES / 'tiny.py'}"]
      parser: matrix
  - name: no-figure
    backend: local
    workload:
      argv: {TRAIN}
      files: ["{SCRIPTS / 'mlperf_train.py'}"]
      parser: {{kind: pattern, figures: {{throughput: {{regex: 'samples per second: ([0-9.]+)', unit: samples/s}}}}}}
axes:
  batch_size: [16]
  label: [plain]
run: {{repeats: 1, timeout: 180}}
"""


def test_mllog_workload_runs_compares_and_gets_its_argv_verbatim(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(COMPARE)
    common = ["-m", "m.yaml", "--db", "r.db", "--workdir", "w"]
    run = cli("run", *common, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    got = rows(tmp_path / "r.db")
    assert len(got) == 4 and {r["status"] for r in got} == {"ok"}
    for r in got:
        assert r["metrics"]["throughput"] > 0 and r["metrics"]["images"] == 3 * 5 * 16
        assert 0 <= r["metrics"]["accuracy"] <= 1 and r["metrics"]["window_s"] > 0
        assert r["raw"]["workload"]["found"]["logged"] == {"global_batch_size": 16}
        assert r["env"]["torch"] and r["env"]["python"]  # the environment is captured beside the program
        argv = received_argv(r["log_tail"])
        assert argv[argv.index("--label") + 1] == WEIRD
    assert len({r["cell_key"] for r in got}) == 2
    again = cli("run", *common, cwd=tmp_path)
    assert again.returncode == 0 and "Nothing to run" in again.stdout + again.stderr  # resume as for bench
    compare = cli("compare", "mllog-a", "mllog-b", "--db", "r.db", "--format", "json", cwd=tmp_path)
    assert compare.returncode == 0, compare.stderr
    pairs = json.loads(compare.stdout)["pairs"]
    assert len(pairs) == 1 and pairs[0]["a_n"] == 2 and pairs[0]["b_n"] == 2


def test_dllogger_measure_and_a_missing_figure(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(KINDS)
    run = cli("run", "-m", "m.yaml", "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    assert run.returncode == 3, run.stdout + run.stderr  # one repeat failed
    by_env = {r["environment"]: r for r in rows(tmp_path / "r.db")}
    dll = by_env["dllogger"]
    assert dll["status"] == "ok", dll["reason"] + dll["log_tail"]
    assert dll["metrics"]["throughput"] > 0 and 0 <= dll["metrics"]["accuracy"] <= 1  # val.top1 % as a fraction
    assert dll["raw"]["workload"]["found"]["keys"]["throughput"]["key"] == "train.total_ips"
    measured = by_env["measured"]
    assert measured["status"] == "ok", measured["reason"] + measured["log_tail"]
    m = measured["metrics"]
    assert m["throughput"] > 0 and m["window_s"] > 0 and m["images"] == 4 * 16
    assert m["telemetry"]["source"] is None and "cpu" in m["telemetry"]["why"]
    assert measured["raw"]["workload"]["script"]["measured_by"] == "measure"
    missing = by_env["no-figure"]
    assert missing["status"] == "failed"
    assert "pattern parser: figure throughput: no line" in missing["reason"]
    assert "samples per second" in missing["reason"]
    assert ":::MLLOG" in missing["log_tail"]  # the output's tail is kept with the failure
    assert missing["metrics"].get("throughput") is None  # never a zero
