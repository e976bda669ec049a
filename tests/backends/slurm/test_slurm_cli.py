"""End to end through the CLI with a real Slurm: --no-wait then collect, Ctrl-C then resume, compare."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.backends.slurm import SlurmBackend
from runner.store import Store

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slurm

SLURM_ONLY = """
name: slurm-e2e
environments:
  - {{name: sl, backend: slurm, python: {python}, gpus_per_node: 0, poll_interval: 1,
     env: {{OMP_NUM_THREADS: "1"}}, tags: [slurm]}}
axes: {{model: [mlp], precision: [fp32], batch_size: [{batch}], device: [cpu]}}
run: {{iterations: {iterations}, warmup: 1, repeats: 2, timeout: 300}}
"""


def cli(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"matrix {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def rows(db: Path) -> list[dict[str, object]]:
    if not db.exists():
        return []
    with Store(db, create=False) as store:
        return [r.columns() for r in store.rows()]  # the stored columns, to assert on


def submitted(db: Path) -> dict[str, dict[str, object]]:
    """The Slurm tasks the store says are submitted and not yet collected (read without writing)."""
    if not db.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        try:
            found = conn.execute("SELECT task_key, task_id, job, run_id FROM batch_jobs "
                                 "WHERE backend='slurm' AND closed_at IS NULL").fetchall()
        except sqlite3.OperationalError:  # no table yet: the store is being created
            return {}
    return {key: {"task": task, "job": job, "run_id": run_id} for key, task, job, run_id in found}


def queued(jobs: set[str]) -> list[str]:
    """The controller's view (squeue), which does not lag behind like accounting can."""
    out = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(sorted(jobs)), "-o", "%T"], capture_output=True,
                         text=True, timeout=30).stdout
    return [s for s in out.split() if s in ("PENDING", "RUNNING", "CONFIGURING")]


def test_doctor_sees_slurm_and_accounting(slurm: None) -> None:
    checks = {c.name: c for c in SlurmBackend.doctor()}
    assert {"sbatch", "sacct", "sinfo", "accounting (sacct)"} <= set(checks)
    assert all(c.ok for name, c in checks.items() if not name.startswith("runtime ")), checks
    # The container runtimes it finds here: each found one with its version, the others not applicable.
    runtimes = {name: c for name, c in checks.items() if name.startswith("runtime ")}
    assert set(runtimes) == {"runtime apptainer", "runtime pyxis", "runtime podman", "runtime charliecloud"}
    for name, command in (("runtime podman", "podman"), ("runtime charliecloud", "ch-run")):
        found = shutil.which(command)
        assert runtimes[name].ok is (True if found else None), runtimes[name]
        if found:
            assert any(ch.isdigit() for ch in runtimes[name].detail) and found in runtimes[name].detail


def test_no_wait_submits_collect_gathers_and_a_second_run_has_nothing_to_do(bare_python: str,
                                                                            tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(SLURM_ONLY.format(python=bare_python, batch=16, iterations=5))
    common = ["-m", str(m), "--db", "r.db", "--workdir", "w"]
    started = time.time()
    first = cli("run", *common, "--no-wait", cwd=tmp_path)
    assert time.time() - started < 30, "--no-wait returns without waiting for the jobs"
    assert rows(tmp_path / "r.db") == []
    assert len(submitted(tmp_path / "r.db")) == 2
    assert "matrix collect" in first.stdout + first.stderr
    deadline = time.time() + 120
    while len(rows(tmp_path / "r.db")) < 2:
        assert time.time() < deadline, "collect never gathered both repeats"
        time.sleep(2)
        cli("collect", "-m", str(m), "--db", "r.db", cwd=tmp_path)  # no --workdir: the store knows the jobs
    stored = rows(tmp_path / "r.db")
    assert {r["status"] for r in stored} == {"ok"}
    assert all(r["env"]["submitted_by_run"] for r in stored)  # type: ignore[index]
    assert submitted(tmp_path / "r.db") == {}
    again = cli("run", *common, cwd=tmp_path)
    assert "Nothing to run" in again.stdout


def test_ctrl_c_leaves_the_jobs_running_and_the_next_run_collects_them(bare_python: str,
                                                                       tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(SLURM_ONLY.format(python=bare_python, batch=17, iterations=3000))
    common = ["-m", str(m), "--db", "r.db", "--workdir", "w"]
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "run", *common], cwd=tmp_path,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while len(records := submitted(tmp_path / "r.db")) < 2:
        assert proc.poll() is None and time.time() < deadline, "the run never submitted"
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "matrix collect" in err and "Cancel" not in err, "no TTY: no question, the jobs keep running"
    jobs = {str(r["job"]) for r in records.values()}
    assert len(queued(jobs)) == 2, "the interrupt left both tasks queued or running"
    first_run = {str(r["run_id"]) for r in records.values()}
    second = cli("run", *common, cwd=tmp_path)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 2 and {r["status"] for r in stored} == {"ok"}, second.stdout + second.stderr
    assert {r["env"]["submitted_by_run"] for r in stored} == first_run  # type: ignore[index]
    assert {r["env"]["slurm_job_id"].split("_")[0] for r in stored} == jobs  # type: ignore[index]
    run_dirs = [p.name for p in (tmp_path / "w" / "slurm").iterdir() if p.is_dir()]
    assert run_dirs == list(first_run), "the second run submitted nothing"


def test_compare_slurm_against_local_on_the_same_cells(bare_python: str, tmp_path: Path) -> None:
    pytest.importorskip("runner.report", reason="matrix compare is not built yet")
    from runner import report
    if not hasattr(report, "compare_command"):
        pytest.skip("runner.report.compare_command is not built yet")
    text = (ROOT / "examples" / "slurm-vs-local.yaml").read_text()
    text = re.sub(r"run: \{.*\}", "run: {iterations: 10, warmup: 2, repeats: 2, timeout: 300, seed: 0}", text)
    text = text.replace("/usr/bin/python3", bare_python)
    m = tmp_path / "m.yaml"
    m.write_text(text)
    run = cli("run", "-m", str(m), "--db", "r.db", "--workdir", "w", cwd=tmp_path)
    stored = rows(tmp_path / "r.db")
    assert {(r["environment"], r["status"]) for r in stored} == {("slurm-debian", "ok"), ("local", "ok")}
    assert len(stored) == 8
    # The Slurm array went in first; this host is the Slurm node, so the run waited for the jobs before
    # measuring here rather than letting the two sides compete for the same cores.
    assert "this run gathers them before it ends" in run.stderr, run.stderr
    slurm_end = max(float(r["finished_at"]) for r in stored if r["environment"] == "slurm-debian")  # type: ignore[arg-type]
    local_start = min(float(r["started_at"]) for r in stored if r["environment"] == "local")  # type: ignore[arg-type]
    assert slurm_end <= local_start, "a local measurement overlapped a Slurm job on the same node"
    out = cli("compare", "slurm-debian", "local", "--db", "r.db", "--format", "json", cwd=tmp_path).stdout
    data = json.loads(out)
    assert data["a"]["environments"] == ["slurm-debian"] and data["b"]["environments"] == ["local"]
    pairs = {p["model"]: p for p in data["pairs"]}
    assert set(pairs) == {"mlp", "mnist_cnn"}
    for pair in pairs.values():
        # Both sides measured the same cell twice; the ratio itself is not asserted (a 2-core node is noisy).
        assert pair["a_n"] == pair["b_n"] == 2 and pair["ratio"] > 0
    table = cli("compare", "slurm-debian", "local", "--db", "r.db", cwd=tmp_path).stdout
    assert "1.13" in table, "the Slurm side ran Debian's PyTorch 1.13"


def test_ctrl_c_on_a_terminal_asks_and_yes_scancels(bare_python: str, tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(SLURM_ONLY.format(python=bare_python, batch=18, iterations=100000))
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", "r.db",
                             "--workdir", "w"], cwd=tmp_path, stdin=slave, stdout=subprocess.DEVNULL,
                            stderr=slave, env={**os.environ, "TERM": "dumb"})
    os.close(slave)
    seen = b""
    try:
        deadline = time.time() + 60
        while len(records := submitted(tmp_path / "r.db")) < 2:
            assert proc.poll() is None and time.time() < deadline, "the run never submitted"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        deadline = time.time() + 30
        while b"(y/N)" not in seen:  # the question may be wrapped: the progress display owns stderr
            assert time.time() < deadline, f"no question on the terminal: {seen[-500:]!r}"
            if select.select([master], [], [], 1)[0]:
                seen += os.read(master, 4096)
        assert b"scancel?" in seen
        os.write(master, b"y\n")
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    jobs = {str(r["job"]) for r in records.values()}
    deadline = time.time() + 30
    while queued(jobs):
        assert time.time() < deadline, f"scancel left {queued(jobs)}"
        time.sleep(1)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 2 and {r["status"] for r in stored} == {"cancelled"}
    assert submitted(tmp_path / "r.db") == {}, "cancelled tasks are not collected again"
