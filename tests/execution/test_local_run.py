"""End to end with the real local backend and real PyTorch: run, resume, timeout, Ctrl-C."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.backends import artifact
from runner.record.stored import StoredRepeat
from runner.store import Store

SMALL = """
name: small
environments: [{{name: cpu, backend: local, tags: [metal], env: {{OMP_NUM_THREADS: "1"}}}}]
axes: {{model: [mnist_cnn], precision: [fp32, bf16], batch_size: [8], device: [cpu]}}
run: {{iterations: {iterations}, warmup: 1, repeats: {repeats}, timeout: {timeout}}}
"""


def cli(*args: str, cwd: Path, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"matrix {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def rows(db: Path, latest_only: bool = True) -> list[StoredRepeat]:
    with Store(db, create=False) as store:
        return list(store.rows(latest_only=latest_only))


def test_run_stores_results_and_second_run_runs_nothing(tmp_path: Path) -> None:
    m = write(tmp_path, SMALL.format(iterations=3, repeats=2, timeout=300))
    first = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 4 and {r.status for r in stored} == {"ok"}, first.stdout + first.stderr
    for r in stored:
        metrics = r.metrics
        assert isinstance(metrics, dict) and metrics["throughput"] > 0
        assert r.env["torch"].startswith("2.13")
        assert r.env["backend"] == "local"
    assert "matrix run summary" in first.stdout and "2 ok" in first.stdout
    second = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    assert "Nothing to run" in second.stdout
    assert len(rows(tmp_path / "r.db", latest_only=False)) == 4
    listing = cli("ls", "--db", "r.db", cwd=tmp_path).stdout
    assert "small" in listing and "4 ok" in listing
    shown = cli("show", "--db", "r.db", cwd=tmp_path).stdout
    assert shown.count("mnist_cnn") == 4 and "bf16" in shown
    # --force measures again and keeps the old rows.
    cli("run", "-m", str(m), "--db", "r.db", "--force", "--only", "precision=fp32", cwd=tmp_path)
    assert len(rows(tmp_path / "r.db", latest_only=False)) == 6


def _bench_processes(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if artifact.name() in cmd and marker in cmd:
                found.append(int(pid))
    return found


def test_a_repeat_that_times_out_is_stored_as_timeout_and_the_rest_complete(tmp_path: Path) -> None:
    text = SMALL.format(iterations=3, repeats=1, timeout=20) + (
        "include: [{model: wrn, precision: fp32, batch_size: 96, wrn_depth: 28, wrn_width: 10}]\n")
    m = write(tmp_path, text)
    proc = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    assert proc.returncode == 3, "a repeat that timed out is not a measurement: run exits non-zero"
    assert "Not measured:" in proc.stdout and "timeout" in proc.stdout
    by_model = {(r.params["model"], r.params["precision"]): r for r in rows(tmp_path / "r.db")}
    assert by_model[("wrn", "fp32")].status == "timeout", proc.stdout
    assert "timeout of 20 s" in str(by_model[("wrn", "fp32")].reason)
    assert by_model[("mnist_cnn", "fp32")].status == "ok"
    assert by_model[("mnist_cnn", "bf16")].status == "ok"
    assert not _bench_processes("--wrn-width 10"), "the timed-out bench process (or a child) survived"


def test_sigint_keeps_stored_repeats_and_the_next_run_completes_only_what_is_missing(tmp_path: Path) -> None:
    m = write(tmp_path, SMALL.format(iterations=20, repeats=3, timeout=300))
    db = tmp_path / "r.db"
    proc = subprocess.Popen([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", str(db)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while time.time() < deadline:
        time.sleep(0.5)
        if db.exists():
            try:
                n = sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if n >= 2:
                break
    time.sleep(1.0)  # the next repeat is in flight
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Interrupted" in err and "again" in err
    before = rows(db)
    ok_before = [r for r in before if r.status == "ok"]
    assert 2 <= len(ok_before) < 6
    assert all(r.status in ("ok", "cancelled") for r in before)
    assert not _bench_processes("--iterations 20 --warmup 1")
    with Store(db) as store:
        (first_run, *_) = [r.run_id for r in store.runs()]
        assert store.runs()[0].status == "interrupted"
        assert store.claims([r.cell_key for r in before]) == {}, "Ctrl-C gives back every claim"
        assert store.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
    cli("run", "-m", str(m), "--db", str(db), cwd=tmp_path)
    after = rows(db)
    assert len(after) == 6 and {r.status for r in after} == {"ok"}
    second = [r for r in after if r.run_id != first_run]
    assert len(second) == 6 - len(ok_before)


def test_two_local_processes_report_one_global_throughput(tmp_path: Path) -> None:
    m = write(tmp_path, SMALL.format(iterations=3, repeats=1, timeout=300).replace(
        "precision: [fp32, bf16]", "precision: [fp32], gpus: [2]"))
    cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    (row,) = rows(tmp_path / "r.db")
    assert row.status == "ok", f"{row.reason}\n{row.log_tail}"
    assert row.metrics["world_size"] == 2


def test_config_error_is_one_line_and_verbose_shows_the_traceback(tmp_path: Path) -> None:
    m = write(tmp_path, SMALL.format(iterations=3, repeats=1, timeout=300).replace("fp32, bf16", "fp32, fp64"))
    proc = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    assert proc.returncode == 2
    assert "m.yaml: axes.precision[1] (line 4)" in proc.stderr and "'fp32', 'tf32'" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "r.db").exists()
    verbose = cli("--verbose", "plan", "-m", str(m), cwd=tmp_path, check=False)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr
    missing = cli("plan", "-m", "nope.yaml", cwd=tmp_path, check=False)
    assert missing.returncode == 2 and "nope.yaml: no such matrix file" in missing.stderr


def test_a_missing_python_does_not_start_stores_nothing_and_is_not_a_crash(tmp_path: Path) -> None:
    m = write(tmp_path, SMALL.format(iterations=3, repeats=1, timeout=300).replace(
        "tags: [metal]", "tags: [metal], python: /nonexistent/python3"))
    proc = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert rows(tmp_path / "r.db") == []
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("not started ")]
    assert "/nonexistent/python3' not found on this host" in line and "nothing stored" in line


@pytest.mark.parametrize("cmd", [["plan"], ["doctor"]])
def test_plan_and_doctor_answer(tmp_path: Path, cmd: list[str]) -> None:
    proc = cli(*cmd, *(["-m", str(Path(__file__).parents[2] / "examples/quickstart.yaml")]
                       if cmd == ["plan"] else []), cwd=tmp_path)
    assert ("local-cpu" in proc.stdout) if cmd == ["plan"] else ("torch (local)" in proc.stdout)


AUTO = """
name: auto
environments: [{name: cpu, backend: local, env: {OMP_NUM_THREADS: "1"}}]
axes: {model: [mlp], precision: [fp32, bf16], batch_size: [16], device: [cpu]}
run: {iterations: {min_time: 0.2s, min: 2, max: 400}, warmup: {max: 40, max_time: 5s, window: 3}, repeats: 2}
"""


def test_auto_warm_up_and_calibrated_window_with_the_real_benchmark(tmp_path: Path) -> None:
    """One real run: each repeat warms up until steady (or says it did not), each cell's first repeat calibrates
    its window and the second starts from the same count (re-sized when its window came out shorter than asked:
    never stored short); the report says how each precision ran on this CPU."""
    m = write(tmp_path, AUTO)
    cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 4 and {r.status for r in stored} == {"ok"}
    with Store(tmp_path / "r.db", create=False) as store:
        calibrated = store.calibrations({str(r.cell_key) for r in stored})
    assert len(calibrated) == 2
    for r in stored:
        metrics = r.metrics
        assert isinstance(metrics, dict)
        cal = metrics["calibration"]  # every repeat with a window time: what it was given and what it did
        assert cal["given"] == (None if r.repeat == 0 else calibrated[str(r.cell_key)])
        completed = sum(e["more"] for e in cal.get("extended") or [])  # a little short: completed where it stood
        if r.repeat == 0 or not cal["resized"]:
            assert metrics["iterations"] == calibrated[str(r.cell_key)] + (completed if r.repeat else 0)
        else:  # far short: measured again with more iterations
            assert metrics["iterations"] > cal["resized"][0]["iterations"] == calibrated[str(r.cell_key)]
        assert metrics["window_s"] >= 0.2 or cal["capped"]
        warm = metrics["warmup"]
        assert warm["how"] in ("steady", "max", "max_time") and warm["steady"] == (warm["how"] == "steady")
        assert warm["iterations"] == len(warm["times"]) >= (6 if warm["steady"] else 1)
        short = sum(a["iterations"] for a in cal["resized"])
        assert metrics["steps"] == warm["iterations"] + short + metrics["iterations"]
        assert "1" in metrics["loss_at"] and str(metrics["steps"]) in metrics["loss_at"]
        cpu = r.raw["precision"]["cpu_math"]  # type: ignore[index]
        assert cpu["native"] is True or "emulated" in cpu["unit"]
        assert r.raw["params"]["window_time"] == 0.2  # type: ignore[index]
    cli("report", "--db", "r.db", "--format", "md", "--out", "rep", cwd=tmp_path)
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "## Warm-up and measured windows" in text and "(calibrated)" in text
    assert "CPU math" in text
    flags = set((Path("/proc/cpuinfo").read_text().split("flags", 1) + [""])[1].split("\n", 1)[0].split())
    if not {"avx512_bf16", "amx_bf16"} & flags:
        assert "bf16 emulated on this CPU" in text and "expect it slower than fp32" in text
