"""Slurm jobs respect the store's claims with a real Slurm: a `matrix collect` while `matrix run` waits for
its jobs gathers nothing and names the run; after a `--no-wait`, two collects at once store each repeat once."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from runner.base.exitcodes import Exit
from runner.store import Store

pytestmark = pytest.mark.slurm

MATRIX = """
name: slurm-claims
environments:
  - {{name: sl, backend: slurm, python: {python}, gpus_per_node: 0, poll_interval: 1,
     env: {{OMP_NUM_THREADS: "1"}}}}
axes: {{model: [mlp], precision: [fp32], batch_size: [{batch}], device: [cpu]}}
run: {{iterations: {iterations}, warmup: 1, repeats: 2, timeout: 300}}
"""


def matrix_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner.cli", *args]


def measured(db: Path) -> Counter[tuple[str, int]]:
    with Store(db, readonly=True) as store:
        return Counter((r.cell_key, r.repeat) for r in store.rows(latest_only=False))


def test_collect_leaves_the_jobs_a_live_run_waits_for_to_that_run(bare_python: str, tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(MATRIX.format(python=bare_python, batch=23, iterations=1000))
    run = subprocess.Popen(matrix_cmd("run", "-m", str(m), "--db", "r.db", "--workdir", "w"), cwd=tmp_path,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while True:  # the run has submitted both tasks and waits for them
            assert time.time() < deadline and run.poll() is None, "the run never submitted"
            if (tmp_path / "r.db").exists():
                with Store(tmp_path / "r.db", readonly=True) as store:
                    if len(store.open_jobs("slurm")) == 2:
                        break
            time.sleep(0.5)
        collect = subprocess.run(matrix_cmd("collect", "-m", str(m), "--db", "r.db"), cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        out, err = run.communicate(timeout=400)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, out + err
    said = " ".join((collect.stdout + collect.stderr).split())
    assert collect.returncode == Exit.BUSY, said
    assert f"(pid {run.pid} on " in said and "did not wait for them (exit status 7)" in said
    assert sorted(measured(tmp_path / "r.db").values()) == [1, 1]


def test_two_collects_at_once_store_each_repeat_once(bare_python: str, tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(MATRIX.format(python=bare_python, batch=29, iterations=5))
    first = subprocess.run(matrix_cmd("run", "-m", str(m), "--db", "r.db", "--workdir", "w", "--no-wait"),
                           cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stdout + first.stderr
    deadline = time.time() + 240
    while sum(measured(tmp_path / "r.db").values()) < 2:
        assert time.time() < deadline, "the collects never gathered both repeats"
        procs = [subprocess.Popen(matrix_cmd("collect", "-m", str(m), "--db", "r.db"), cwd=tmp_path,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode in (0, Exit.BUSY), out + err
        time.sleep(1)
    assert sorted(measured(tmp_path / "r.db").values()) == [1, 1], "no repeat stored twice"
    with Store(tmp_path / "r.db", readonly=True) as store:
        assert store.open_jobs("slurm") == {}
