"""`matrix bisect` and `matrix diff` as a user runs them: exit statuses from the one table, outputs, the store
reused. Most tests fill the store first (so nothing is measured); one runs the real benchmark."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from runner import cli, matrix
from runner.base.exitcodes import Exit
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store

MATRIX = """
name: steps
environments:
{envs}
axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu]}}
run: {{iterations: 3, warmup: 1, repeats: 3, timeout: 300}}
"""


def write_matrix(tmp_path: Path, n: int) -> Path:
    envs = "\n".join(f'  - {{name: v{i}, backend: local, env: {{OMP_NUM_THREADS: "1", STEP: "{i}"}}}}'
                     for i in range(n))
    path = tmp_path / "steps.yaml"
    path.write_text(MATRIX.format(envs=envs))
    return path


def software(i: int, torch: str) -> dict[str, object]:
    return {"python_packages": {"torch": torch, "numpy": "2.1.0", "filelock": "3.13.1"},
            "env_vars": {"OMP_NUM_THREADS": "1", "STEP": str(i)},
            "dpkg": {"libc6": "2.36-9", "libgomp1": "12.2.0-14" if torch < "2.5" else "14.2.0-1", "zlib1g": "1.2.13"},
            "torch_config": f"PyTorch built with:\n  - GCC 12.2\n  - Intel(R) MKL-DNN v{'2.6.3' if torch < '2.5' else '3.5.3'}"
                            " (Git Hash N/A)\n  - CPU capability usage: AVX2\n  - Build settings: BLAS_INFO=generic, "
                            "USE_MKLDNN=ON, USE_OPENMP=ON, "}


def fill(tmp_path: Path, levels: list[float | str], cv: float = 0.01, seed: int = 0, repeats: int = 10
         ) -> tuple[Path, Path]:
    """A store holding `repeats` repeats of every environment's cell (level: throughput, or a status)."""
    m_path = write_matrix(tmp_path, len(levels))
    cells = matrix.load(m_path).cells()
    rng = np.random.default_rng(seed)
    db = tmp_path / "r.db"
    with Store(db) as store:
        store.start_run("fill", str(m_path), "steps", [])
        for i, (cell, level) in enumerate(zip(cells, levels, strict=True)):
            torch = "2.4.0" if i < len(levels) // 2 else "2.6.0"
            for r in range(repeats):
                env = {"torch": torch, "python": "3.11.2", "numpy": "2.1.0", "os": "Debian GNU/Linux 12 (bookworm)",
                       "nccl": None, "cpu": "AMD EPYC", "software": software(i, torch)}
                if isinstance(level, str):
                    out = Outcome(Status(level), {"schema": 1, "status": level, "metrics": {}, "env": env}, "",
                                  level, 1.0, 2.0)
                else:
                    value = float(level * (1 + cv * rng.standard_normal()))
                    out = Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": value},
                                              "env": env, "precision": {"mechanism": "none", "dtype": "float32"}},
                                  "", "", 1.0, 2.0)
                store.add("fill", Task(cell, r), out)
        store.finish_run("fill", "complete")
    return m_path, db


def bisect(m_path: Path, db: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["bisect", "-m", str(m_path), "--db", str(db), *args], terminal_width=200)
    return result.exit_code, result.output


def test_found_names_the_pair_the_change_and_what_differs(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, [100.0] * 6 + [70.0] * 2)
    code, out = bisect(m_path, db, "--threshold", "10%")
    assert code == Exit.OK, out
    assert "Culprit: v5 -> v6: -29.8% (1.42x slower), 98.75% CI -33.3%..-26.0%, p<0.001" in out
    assert "one step explains 100% of the end-to-end change" in out
    assert "Measured 5 of 8 environments, 15 repeats (0 measured now, 15 already stored); a full sweep: 8 " \
           "environments x 3 repeats = 24 repeats" in out
    assert "What differs between v5 and v6" in out
    assert "STEP" in out and "PyTorch" not in out  # the variable that differs; torch is 2.6.0 on both


def test_json_and_markdown_outputs(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, [100.0] * 3 + [150.0] * 3)
    code, out = bisect(m_path, db, "--threshold", "10%", "--format", "json")
    assert code == Exit.OK, out
    doc = json.loads(out)
    assert doc["kind"] == "matrix-bisect" and doc["outcome"] == "found" and doc["exit_status"] == 0
    assert (doc["culprit"]["a"], doc["culprit"]["b"]) == ("v2", "v3") and doc["culprit"]["verdict"] == "fail"
    assert doc["culprit"]["p_value"] < 0.0125 and doc["culprit"]["ci"][0] > 0.4
    assert doc["cost"]["measured_now"] == 0 and doc["cost"]["full_sweep"] == 18
    packages = {p["kind"]: p for p in doc["diff"]["packages"]}
    assert packages["Python packages"]["changed"] == [{"name": "torch", "a": "2.4.0", "b": "2.6.0"}]
    assert {"name": "libgomp1", "a": "12.2.0-14", "b": "14.2.0-1"} in packages["system packages (dpkg)"]["changed"]
    assert {"what": "oneDNN", "a": "v2.6.3", "b": "v3.5.3"} in doc["diff"]["build"]
    md = bisect(m_path, db, "--threshold", "10%", "--format", "md")[1]
    assert md.count("| ") > 10 and "**What differs between v2 and v3**" in md


def test_no_change_exits_1(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, [100.0] * 5)
    code, out = bisect(m_path, db, "--threshold", "10%")
    assert code == Exit.FAILED and "No change: the ends are the same within the threshold" in out, out
    assert "Measured 2 of 5 environments" in out


def test_a_spread_change_exits_8_and_names_each_step(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, [100.0, 100.0, 130.0, 130.0, 170.0, 170.0])
    code, out = bisect(m_path, db, "--threshold", "10%")
    assert code == Exit.SPREAD, out
    assert "No single culprit" in out and "step v1 -> v2" in out and "step v3 -> v4" in out
    assert "Culprit" not in out


def test_undecided_exits_5_and_names_no_culprit(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, [100.0, 100.0, 112.0, 112.0], cv=0.3, seed=3)
    code, out = bisect(m_path, db, "--threshold", "10%")
    assert code == Exit.UNDECIDED, out
    assert "Undecided" in out and "Culprit" not in out


def test_a_status_change_counts(tmp_path: Path) -> None:
    m_path, db = fill(tmp_path, ["unsupported"] * 3 + [100.0] * 2)
    code, out = bisect(m_path, db, "--metric", "status")
    assert code == Exit.OK and "Culprit: v2 -> v3: unsupported -> ok" in out, out


@pytest.mark.parametrize(("args", "says"), [
    (["--threshold", "0%"], "--threshold 0%: a percentage above 0"),
    (["--threshold", "ten"], "--threshold ten"),
    (["--metric", "speed"], "unknown metric 'speed'"),
    (["--max-repeats", "1"], "--max-repeats 1: from 2"),
    (["--format", "html"], "unknown bisect format 'html'"),
    (["v0"], "at least two environments"),
    (["v0", "nope"], "no environment 'nope'"),
    (["--template", "v0"], "--template and --gpus go with --images"),
])
def test_mistakes_exit_2_with_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    m_path, db = fill(tmp_path, [100.0, 100.0], repeats=2)
    code, out = bisect(m_path, db, *args)
    assert code == Exit.USAGE and says in out and "Traceback" not in out, out


def test_diff_between_any_two_environments(tmp_path: Path) -> None:
    _, db = fill(tmp_path, [100.0] * 4, repeats=2)
    runner = CliRunner()
    out = runner.invoke(cli.app, ["diff", "v0", "v3", "--db", str(db)])
    assert out.exit_code == 0, out.output
    text = out.output
    assert "2.4.0" in text and "2.6.0" in text and "libgomp1" in text and "STEP" in text and "oneDNN" in text
    assert "zlib1g" not in text  # the same on both
    doc = json.loads(runner.invoke(cli.app, ["diff", "v0", "v3", "--db", str(db), "--format", "json"]).output)
    assert doc["kind"] == "matrix-diff" and {"what": "PyTorch", "a": "2.4.0", "b": "2.6.0"} in doc["differs"]
    same = runner.invoke(cli.app, ["diff", "v0", "v1", "--db", str(db), "--all"]).output
    assert "What each recorded" in same and "Debian GNU/Linux 12" in same
    missing = runner.invoke(cli.app, ["diff", "v0", "v9", "--db", str(db)])
    assert missing.exit_code == Exit.USAGE and "environment 'v9' has no result" in missing.output
    assert "environments there: v0, v1, v2, v3" in missing.output
    nostore = runner.invoke(cli.app, ["diff", "a", "b", "--db", str(tmp_path / "none.db")])
    assert nostore.exit_code == Exit.STORE


def test_a_real_bisect_measures_through_the_store_and_a_second_measures_nothing(tmp_path: Path) -> None:
    """The real benchmark in four local environments; in the first two a `torch` package that cannot be imported
    shadows the real one (PYTHONPATH), so the benchmark reports `unsupported`: a change of status between v1 and
    v2. Two bisects started together share the work through the store's claims (no repeat measured twice); a
    third measures nothing and answers the same; the difference names PYTHONPATH."""
    broken = tmp_path / "broken"
    (broken / "torch").mkdir(parents=True)
    (broken / "torch" / "__init__.py").write_text("raise ImportError('this torch is broken on purpose')\n")
    envs = "\n".join(
        f'  - {{name: v{i}, backend: local, env: {{OMP_NUM_THREADS: "1"'
        + (f', PYTHONPATH: "{broken}"' if i < 2 else "") + "}}" for i in range(4))
    m_path = tmp_path / "real.yaml"
    m_path.write_text(MATRIX.format(envs=envs).replace("repeats: 3", "repeats: 2"))
    cmd = [sys.executable, "-m", "runner.cli", "bisect", "-m", str(m_path), "--db", "r.db", "--metric", "status",
           "--max-repeats", "2", "--workdir", "work", "--format", "json"]
    together = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in together]
    assert [p.returncode for p in together] == [Exit.OK, Exit.OK], outs
    docs = [json.loads(out) for out, _ in outs]
    doc = docs[0]
    assert (doc["culprit"]["a"], doc["culprit"]["b"], doc["culprit"]["why"]) == ("v1", "v2", "unsupported -> ok")
    assert docs[1]["decisions"] == doc["decisions"]
    assert sum(d["cost"]["measured_now"] for d in docs) == doc["cost"]["repeats"] > 0  # shared, not doubled
    with Store(tmp_path / "r.db", readonly=True) as store:
        every = [(r.cell_key, r.repeat) for r in store.rows(latest_only=False)]
        assert len(every) == len(set(every)) == doc["cost"]["repeats"]  # no repeat measured twice
    second = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    again = json.loads(second.stdout)
    assert second.returncode == Exit.OK and again["cost"]["measured_now"] == 0, second.stderr
    assert again["decisions"] == doc["decisions"] and "bisect: measuring" not in second.stderr
    with Store(tmp_path / "r.db", readonly=True) as store:
        rows = list(store.rows())
        assert len(rows) == doc["cost"]["repeats"]
        assert all(r.capture_id for r in rows)  # what each environment is made of, kept once per content
        assert len(store.captures(r.capture_id for r in rows)) <= 4
        kept = store.bisects()  # every answer is kept, as printed, for the published site
        assert sorted(json.dumps(b["answer"], sort_keys=True) for b in kept) == sorted(
            json.dumps(d, sort_keys=True) for d in [*docs, again])
        assert all(len(b["cell_keys"]) == len(doc["environments"]) and "bisect" in b["argv"] for b in kept)
    from runner.publish import publish
    publish([tmp_path / "r.db"], tmp_path / "site")
    page = (tmp_path / "site" / "bisects.html").read_text()
    assert page.count("<h2>") == 3 and "found" in page and "v1</a> → <a href=\"cells/" in page
    changes = {c["what"]: (c["a"], c["b"]) for c in doc["diff"]["env_vars"]}
    assert changes["PYTHONPATH"] == (str(broken), "")
