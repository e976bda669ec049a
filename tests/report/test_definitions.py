"""One definition of a cell everywhere: a name (environment and params) measured under two definitions (another
`env`, image or iterations: another cell key) is never averaged into one mean by reports, compare or the gate.

Seen before the fix: 100 and 200 img/s under one environment name became `n=6, 151 ± 55` in the report while
`matrix check` judged the newer key alone.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runner import analysis as an
from runner.report import compare_command, report_command
from runner.store import SCHEMA, Store
from tests.conftest import require

PARAMS = {"model": "mlp", "precision": "fp32", "batch_size": 32, "dataset": "synthetic", "gpus": 1, "nodes": 1,
          "device": "cpu"}


def fill(db: Path, cells: list[tuple[str, str, str, list[float], int]],
         precision: dict[str, dict[str, object]] | None = None, first_repeat: dict[str, int] | None = None) -> Path:
    """(run id, cell key, environment, throughputs, iterations) in store order, as `matrix run` stores them;
    `precision`: per run id, the recipe bench records (its result's "precision"); `first_repeat`: per run id, the
    number of its first repeat (0 unless said)."""
    with Store(db) as store, store.db:
        t = 1_700_000_000.0
        for run_id, key, env, values, iterations in cells:
            store.db.execute("INSERT OR IGNORE INTO runs (run_id, schema, started_at, finished_at, matrix_name, "
                             "argv, host, status) VALUES (?, ?, ?, ?, 'defs', '[]', 'h', 'complete')",
                             (run_id, SCHEMA, t, t + 60))
            for repeat, v in enumerate(values, (first_repeat or {}).get(run_id, 0)):
                t += 10
                raw = {"params": {**PARAMS, "iterations": iterations, "warmup": 1, "seed": 0},
                       **({"precision": precision[run_id]} if precision and run_id in precision else {})}
                store.db.execute(
                    "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
                    " status, reason, metrics, env, raw, log_tail, started_at, finished_at)"
                    " VALUES (?, ?, ?, ?, ?, 'local', '[]', ?, 'ok', NULL, ?, ?, ?, '', ?, ?)",
                    (SCHEMA, run_id, key, repeat, env, json.dumps(PARAMS),
                     json.dumps({"throughput": v, "window_s": 1.0}), json.dumps({"torch": "2.13.0", "device": "cpu"}),
                     json.dumps(raw), t, t + 5))
    return db


SLOW, FAST = [100.0, 101.0, 99.0], [200.0, 201.0, 199.0]


@pytest.fixture
def redefined(tmp_path: Path) -> Path:
    """`base`, and `cand` measured under two definitions of one name (its `env` changed between runs)."""
    return fill(tmp_path / "r.db", [("r1", "kbase", "base", SLOW, 5), ("r1", "kold", "cand", SLOW, 5),
                                    ("r2", "knew", "cand", FAST, 5)])


def test_a_report_shows_the_newest_definition_and_lists_both(redefined: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    report_command(redefined, None, ["md", "json"], out)
    doc = json.loads((out / "report.json").read_text())
    cand = [c for c in doc["cells"] if c["environment"] == "cand"]
    assert len(cand) == 1 and cand[0]["cell_key"] == "knew" and cand[0]["n"] == 3
    assert cand[0]["throughput_mean"] == pytest.approx(200.0)       # not 150 over n=6
    assert cand[0]["settings"] == "iterations=5 warmup=1 seed=0"
    assert [(d["cell_key"], d["n"], d["shown"]) for d in doc["definitions"]] == [("kold", 3, False),
                                                                                ("knew", 3, True)]
    md = (out / "report.md").read_text()
    assert "## Cells measured under more than one definition" in md
    assert "1 cell was measured under more than one definition" in md and "never a mix" in md
    assert "150" not in md and "n=6" not in md
    assert "2 runs stored 9 repeats; the tables show 6 of them" in md and ": 6 repeats in 2 cells" in md
    assert "older definitions of 1 cell are listed, not averaged in" in md


def test_compare_pairs_the_newest_definition_and_pools_only_when_asked(redefined: Path) -> None:
    doc = json.loads(compare_command(redefined, "base", "cand", "json"))
    (pair,) = doc["pairs"]
    assert pair["b_n"] == 3 and pair["b_cell_keys"] == "knew" and pair["b_mean"] == pytest.approx(200.0)
    assert [d["cell_key"] for d in doc["definitions"]["b"]] == ["kold", "knew"] and not doc["definitions"]["a"]
    md = compare_command(redefined, "base", "cand", "md")
    assert "## Cells measured under more than one definition" in md and "--pool" in md
    pooled = json.loads(compare_command(redefined, "base", "cand", "json", pool=True))
    assert pooled["pairs"][0]["b_n"] == 6 and pooled["definitions"]["pooled"] is True
    assert pooled["pairs"][0]["b_cell_keys"] == "kold, knew"


def test_one_key_that_ran_another_recipe_is_another_definition(tmp_path: Path) -> None:
    """A newer benchmark whose `auto` chose foreach SGD where an older one chose fused (the H100's plain AMP row: the
    fused runs diverged) stores other work under the same cell key: the key does not hash what bench chose. Those
    repeats are two definitions, never one mean; the table says what tells them apart."""
    amp = {"mechanism": "native", "dtype": "float16", "loss_scale": "dynamic", "channels_last": True}
    db = fill(tmp_path / "r.db", [("r1", "kbase", "base", SLOW, 5), ("r1", "kamp", "cand", FAST, 5),
                                  ("r2", "kamp", "cand", SLOW, 5)],
              {"r1": {**amp, "optimizer": "sgd-momentum-0.9-fused"},
               "r2": {**amp, "optimizer": "sgd-momentum-0.9-foreach"}}, {"r2": 3})  # repeats 3-5 added later
    doc = json.loads(compare_command(db, "base", "cand", "json"))
    (pair,) = doc["pairs"]
    assert pair["b_n"] == 3 and pair["b_mean"] == pytest.approx(100.0)  # the newest recipe alone, not 150 over n=6
    (first, second) = doc["definitions"]["b"]
    assert (first["n"], first["shown"], second["n"], second["shown"]) == (3, False, 3, True)
    assert first["differs"] == second["differs"] == "what the benchmark ran (recipe)"
    assert "what the benchmark ran (recipe)" in compare_command(db, "base", "cand", "md")
    from runner.analysis.history import history

    with Store(db, readonly=True) as store:
        nights = history(an.frame(list(store.rows(latest_only=False))))
    assert not nights["step"].any()  # two recipes are two series, not a step from one to the other
    assert list(nights["boundary"])[1] == ("what the benchmark ran (recipe) autocast fp16 · loss scale dynamic · "
                                           "channels_last · SGD, fused -> autocast fp16 · loss scale dynamic · "
                                           "channels_last · SGD, foreach")


def test_pairs_with_other_run_settings_are_not_comparable(tmp_path: Path) -> None:
    db = fill(tmp_path / "s.db", [("r1", "ka", "base", SLOW, 5), ("r2", "kb", "cand", FAST, 50)])
    doc = json.loads(compare_command(db, "base", "cand", "json"))
    (pair,) = doc["pairs"]
    assert pair["decision"] == "undecided" and pair["ratio"] is None and pair["p_value"] is None
    assert pair["verdict"] == ("not comparable: run settings differ (iterations=5 warmup=1 seed=0 vs "
                               "iterations=50 warmup=1 seed=0)")
    assert doc["geomean_ratio"] is None and doc["decisions"]["undecided"] == 1


def test_choose_keeps_every_row_of_a_name_with_one_definition() -> None:
    df = an.frame(an.StoredRepeat.many([{"id": i, "run_id": "r", "cell_key": "k", "repeat": i, "environment": "e", "params": PARAMS,
                    "status": "ok", "metrics": {"throughput": 1.0}} for i in range(3)]))
    defs = an.choose(df, an.CELL_KEYS)
    assert defs.frame is df and defs.several.empty and defs.n_names == 0


# With the real `matrix run` -------------------------------------------------------------------------

MATRIX = """
name: defs
environments:
  - {{name: base, backend: local, env: {{OMP_NUM_THREADS: "1"}}}}
  - {{name: cand, backend: local, env: {{OMP_NUM_THREADS: "1", MATRIX_VARIANT: "{variant}"}}}}
axes: {{model: [mlp], precision: [fp32], batch_size: [16], device: [cpu]}}
run: {{iterations: {iterations}, warmup: 1, repeats: 2, timeout: 300}}
references:
  - {{throughput: ">= 1"}}
"""


def cli(*args: str, cwd: Path, code: int = 0) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == code, f"matrix {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_a_redefined_environment_with_the_real_cli(tmp_path: Path) -> None:
    """`cand` run, its `env` changed and run again, then its iterations changed and run again: report, compare,
    the gate and check agree on which definition they judge, and none pools two."""
    require(importlib.util.find_spec("torch") is not None, "PyTorch is not installed in this interpreter")

    def run(matrix: str, *more: str) -> None:
        """`matrix run`, which then judges the file's reference (throughput >= 1) on two repeats of a real training:
        on a loaded machine two repeats can differ ninefold (1074 and 9661 img/s), and the reference is then
        undecided (exit 5), truly. Which definition each command judges is this test's question, not the reference."""
        done = subprocess.run([sys.executable, "-m", "runner.cli", "run", "-m", matrix, "--db", "r.db", *more],
                              cwd=tmp_path, capture_output=True, text=True, timeout=900, check=False)
        said = f"matrix run exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        assert done.returncode in (0, 5), said
        assert done.returncode == 0 or "undecided" in done.stdout.lower(), said

    def matrix_file(name: str, variant: str, iterations: int) -> str:
        (tmp_path / name).write_text(MATRIX.format(variant=variant, iterations=iterations))
        return name

    v1, v2, v2_long = (matrix_file("v1.yaml", "1", 3), matrix_file("v2.yaml", "2", 3),
                       matrix_file("v3.yaml", "2", 4))
    run(v1)
    run(v2, "--env", "cand")

    compare = json.loads(cli("compare", "base", "cand", "--db", "r.db", "--format", "json", cwd=tmp_path).stdout)
    (pair,) = compare["pairs"]
    old, new = (d["cell_key"] for d in compare["definitions"]["b"])
    assert pair["b_n"] == 2 and pair["b_cell_keys"] == new != old
    assert compare["definitions"]["b"][0]["differs"].startswith("the environment's definition")
    check = json.loads(cli("check", "-m", v2, "--db", "r.db", "--env", "cand", "--format", "json",
                           cwd=tmp_path).stdout)
    assert [(v["cell_key"], v["n"]) for v in check["verdicts"]] == [(new, 2)]  # the same definition as compare
    out = tmp_path / "rep"
    cli("report", "--db", "r.db", "--format", "json", "--format", "md", "--out", str(out), cwd=tmp_path)
    cells = {c["environment"]: c for c in json.loads((out / "report.json").read_text())["cells"]}
    assert cells["cand"]["cell_key"] == new and cells["cand"]["n"] == 2
    assert "## Cells measured under more than one definition" in (out / "report.md").read_text()

    # Other iterations under the same names: not comparable with base's, so the gate cannot decide.
    run(v2_long, "--env", "cand")
    gate = cli("compare", "base", "cand", "--db", "r.db", "--fail-on", "slower:50%", cwd=tmp_path, code=5)
    assert "not comparable: run settings differ (iterations=3 warmup=1 seed=0 vs iterations=4" in gate.stdout
    assert "Gate undecided" in gate.stdout
