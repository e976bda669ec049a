"""`matrix run` with docker environments, as a user runs it: real engine, real PyTorch on both sides."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runner.store import Store
from tests.backends.docker.dockertools import IMAGE, cli, cli_env, rows, write_matrix

pytestmark = pytest.mark.docker

AXES = "axes: {model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu]}"
BOX = f'{{name: box, backend: docker, image: "{IMAGE}", tags: [container], env: {{OMP_NUM_THREADS: "1"}}}}'


def own_containers(client: Any, db: Path, all: bool = False) -> list[Any]:
    """The containers of the runs in this test's store: the engine is shared with other checkouts' runs."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            ids = [r[0] for r in conn.execute("SELECT run_id FROM runs")]
    except sqlite3.OperationalError:  # the run has not created its tables yet
        return []
    return [c for run_id in ids for c in client.containers.list(
        all=all, filters={"label": ["matrix.managed=true", f"matrix.run_id={run_id}"]})]


def run_ids(db: Path) -> set[str]:
    return {str(r["run_id"]) for r in rows(db, latest_only=False)}


def start_run(m: Path, cwd: Path, quiet: bool = False) -> subprocess.Popen[str]:
    """`matrix run -m M --db r.db` in the background, its output piped (or dropped when quiet)."""
    out = subprocess.DEVNULL if quiet else subprocess.PIPE
    return subprocess.Popen([sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", "r.db"],
                            cwd=cwd, env=cli_env(), stdout=out, stderr=out, text=True)


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while not predicate():
        if time.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


# What these two check is matrix's own (a local environment beside a container; Ctrl-C), not the engine's
# API: they run against Docker only, to spare CI two minutes (the rest runs against Podman as well).
DOCKER_ONLY = pytest.mark.parametrize("engine_kind", ["docker"], indirect=True)


@DOCKER_ONLY
def test_container_and_local_run_side_by_side_with_their_own_torch(tmp_path: Path, run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: side-by-side
        environments:
          - {BOX}
          - {{name: metal, backend: local, tags: [bare-metal], env: {{OMP_NUM_THREADS: "1"}}}}
        {AXES}
        run: {{iterations: 3, warmup: 1, repeats: 2, timeout: 120}}
        """)
    out = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    stored = rows(tmp_path / "r.db")
    assert len(stored) == 4 and {r["status"] for r in stored} == {"ok"}, out.stdout + out.stderr
    box = [r for r in stored if r["environment"] == "box"]
    metal = [r for r in stored if r["environment"] == "metal"]
    assert len(box) == 2 and len(metal) == 2
    for r in box:
        env = r["env"]
        assert r["backend"] == "docker" and env["backend"] == "docker"
        assert env["torch"].startswith("1.13"), env["torch"]
        assert env["image"] == IMAGE and env["image_id"].startswith("sha256:")
        assert "repo_digest" in env and len(env["container_id"]) == 64
        assert r["metrics"]["throughput"] > 0
    assert box[0]["env"]["container_id"] == box[1]["env"]["container_id"]  # one container, two execs
    for r in metal:
        assert r["backend"] == "local" and r["env"]["torch"].startswith("2.13"), r["env"]["torch"]
    assert box[0]["cell_key"] != metal[0]["cell_key"]
    (run_id,) = run_ids(tmp_path / "r.db")
    assert run_label_gone(run_id) == []


def test_image_option_runs_the_axes_in_an_adhoc_environment(tmp_path: Path, run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "axes.yaml", f"""
        name: axes-only
        environments: [{{name: unused, backend: local}}]
        {AXES}
        run: {{iterations: 2, warmup: 1, repeats: 1, timeout: 120}}
        """)
    cli("run", "-m", str(m), "--db", "r.db", "--image", IMAGE, cwd=tmp_path)
    (row,) = rows(tmp_path / "r.db")
    assert row["environment"] == "debian-torch-1.13" and row["backend"] == "docker"
    assert row["status"] == "ok" and row["env"]["torch"].startswith("1.13")
    assert run_label_gone(str(row["run_id"])) == []


def test_hung_and_failing_repeats_are_results_and_leave_no_container(tmp_path: Path, run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: bad-cells
        environments: [{BOX}]
        axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16], device: [cpu],
                dataset: [synthetic, "npz:/nowhere/missing.npz"]}}
        run: {{iterations: 10000000, warmup: 1, repeats: 1, timeout: 30}}
        """)  # 30 s: the failing cell's container start and torch import took over 15 s on a loaded CI once
    t0 = time.time()
    out = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    took = time.time() - t0
    assert out.returncode == 3, "a repeat that did not end ok makes the run exit 3"
    by_dataset = {r["params"]["dataset"]: r for r in rows(tmp_path / "r.db")}
    hung, bad = by_dataset["synthetic"], by_dataset["npz:/nowhere/missing.npz"]
    assert hung["status"] == "timeout" and "timeout of 30 s" in hung["reason"], out.stdout + out.stderr
    assert bad["status"] == "failed" and bad["reason"] and "missing.npz" in (bad["reason"] + bad["log_tail"]), (
        bad["status"], bad["reason"], bad["log_tail"][-1000:])
    # Bounded by the timeout (30 s a repeat, plus start-up), not by ten million iterations.
    assert took < 150, f"two repeats with a 30 s timeout took the run {took:.0f} s"
    assert run_label_gone(str(hung["run_id"])) == []


@DOCKER_ONLY
def test_sigint_mid_repeat_keeps_what_was_stored_and_removes_the_container(tmp_path: Path,
                                                                           run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: interrupt-me
        environments: [{BOX}]
        {AXES}
        run: {{iterations: 60, warmup: 1, repeats: 2, timeout: 300}}
        """)
    logs = tmp_path / "results" / "logs"
    proc = start_run(m, tmp_path)
    try:
        # The second repeat's bench has started once its log exists and says it is measuring.
        wait_for(lambda: any(p.read_text() for p in logs.glob("*/*-r1.rank0.log")), 120, "the second repeat")
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stdout + stderr
    stored = {r["repeat"]: r for r in rows(tmp_path / "r.db")}
    assert stored[0]["status"] == "ok" and stored[1]["status"] == "cancelled", stdout + stderr
    (run_id,) = run_ids(tmp_path / "r.db")
    assert run_label_gone(run_id) == []
    again = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path)
    assert "1 of 2 repeats to run" in again.stderr
    assert [r["status"] for r in sorted(rows(tmp_path / "r.db"), key=lambda r: r["repeat"])] == ["ok", "ok"]


def test_container_killed_from_outside_fails_that_repeat_and_the_rest_runs(tmp_path: Path, docker_client: Any,
                                                                          run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: killed
        environments: [{BOX}]
        axes: {{model: [mnist_cnn], precision: [fp32], batch_size: [16, 8], device: [cpu]}}
        run: {{iterations: 60, warmup: 1, repeats: 1, timeout: 300}}
        """)
    logs = tmp_path / "results" / "logs"
    proc = start_run(m, tmp_path)
    try:
        wait_for(lambda: any(p.read_text() for p in logs.glob("*/*.rank0.log")), 120, "the first repeat")
        (victim,) = own_containers(docker_client, tmp_path / "r.db")
        victim.kill()
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 3, stdout + stderr  # the killed repeat failed
    by_batch = {r["params"]["batch_size"]: r for r in rows(tmp_path / "r.db")}
    killed, after = by_batch[16], by_batch[8]
    assert killed["status"] == "failed" and "stopped during the repeat" in killed["reason"], killed["reason"]
    assert "[bench]" in killed["log_tail"]  # what the repeat had said before it died
    assert after["status"] == "ok" and after["env"]["container_id"] != victim.id
    assert run_label_gone(str(killed["run_id"])) == []
    # The failed repeat is a result: a plain re-run measures nothing, --rerun-failed only that repeat.
    assert "Nothing to run" in cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False).stdout
    rerun = cli("run", "-m", str(m), "--db", "r.db", "--rerun-failed", cwd=tmp_path)  # now ok: exit 0
    assert "1 of 2 repeats to run" in rerun.stderr
    assert {r["status"] for r in rows(tmp_path / "r.db")} == {"ok"}


def test_missing_image_and_gpus_without_runtime_do_not_start_store_nothing_and_the_rest_runs(
        tmp_path: Path, docker_client: Any, run_label_gone: Any, engine_kind: str) -> None:
    # Docker needs its NVIDIA runtime; Podman takes CDI devices, which its 4.3 API cannot resolve at all.
    has_nvidia = engine_kind == "docker" and "nvidia" in (docker_client.info().get("Runtimes") or {})
    gpu_env = "" if has_nvidia else f'  - {{name: gpu, backend: docker, image: "{IMAGE}", gpus: all}}'
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: unrunnable
        environments:
          - {{name: ghost, backend: docker, image: "matrix/no-such-image:0.0"}}
        {gpu_env}
          - {BOX}
        {AXES}
        run: {{iterations: 2, warmup: 1, repeats: 2, timeout: 120}}
        """)
    out = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    said = out.stdout + out.stderr
    assert out.returncode == 3, said
    by_env: dict[str, list[dict[str, Any]]] = {}
    for r in rows(tmp_path / "r.db"):
        by_env.setdefault(str(r["environment"]), []).append(r)
    assert set(by_env) == {"box"}, said  # nothing stored for the environments that could not start
    (ghost,) = [ln for ln in out.stderr.splitlines() if ln.startswith("not started ghost: ")]
    assert "matrix/no-such-image:0.0" in ghost and "pulling it failed" in ghost and "2 repeats not run" in ghost
    if not has_nvidia:
        (gpu,) = [ln for ln in out.stderr.splitlines() if ln.startswith("not started gpu: ")]
        want = (("as CDI devices (nvidia.com/gpu=all)", "nvidia-ctk cdi generate") if engine_kind == "podman"
                else ("no NVIDIA runtime", "NVIDIA Container Toolkit"))
        assert all(w in gpu for w in want), gpu
    assert [r["status"] for r in by_env["box"]] == ["ok", "ok"]  # the rest of the matrix went on
    assert "Traceback" not in out.stderr
    (run_id,) = run_ids(tmp_path / "r.db")
    assert run_label_gone(run_id) == []
    with Store(tmp_path / "r.db", create=False) as store:
        assert [r.status for r in store.runs()] == ["incomplete"]
    # Nothing was measured: the next run tries the environments that could not start, and only those.
    again = cli("run", "-m", str(m), "--db", "r.db", cwd=tmp_path, check=False)
    assert again.returncode == 3, again.stderr
    tried = {ln.split(":")[0].removeprefix("not started ") for ln in again.stderr.splitlines()
             if ln.startswith("not started ")}
    assert tried == {"ghost"} | ({"gpu"} if gpu_env else set()), again.stderr
    assert f"{2 * len(tried)} of {2 * len(tried) + 2} repeats to run (2 already stored)" in again.stderr
    assert "pulling it failed" in again.stderr


def test_matrix_clean_reaps_the_container_of_a_killed_run(tmp_path: Path, docker_client: Any,
                                                          run_label_gone: Any) -> None:
    m = write_matrix(tmp_path / "m.yaml", f"""
        name: killed-hard
        environments: [{BOX}]
        {AXES}
        run: {{iterations: 10000, warmup: 1, repeats: 1, timeout: 300}}
        """)
    proc = start_run(m, tmp_path, quiet=True)
    try:
        wait_for(lambda: bool(own_containers(docker_client, tmp_path / "r.db")), 120, "the run's container")
    finally:
        proc.kill()  # SIGKILL: the run cannot clean up after itself
        proc.wait()
    (left,) = own_containers(docker_client, tmp_path / "r.db", all=True)
    out = cli("clean", cwd=tmp_path).stdout
    assert left.name in out and "removed" in out, out
    assert run_label_gone(left.labels["matrix.run_id"]) == []
    assert "nothing to clean" in cli("clean", cwd=tmp_path).stdout
