"""A Slurm job publishes its files without following a link planted in the results directory while it waited
in the queue: at the temporary names it once used (`out/TASK.done.tmp`, `out/TASK.err.tmp`), at its final names
(a link to a folder there once had `mv` move the file into that folder) and at its ranks' files. The job is
held while the links are planted, then released; it ends ok, and what the links point to is unchanged."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from runner.backends.context import RunContext
from runner.backends.slurm import SlurmBackend, SlurmEnvironment
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store

pytestmark = pytest.mark.slurm


def test_a_held_job_never_writes_through_links_planted_meanwhile(bare_python: str, tmp_path: Path) -> None:
    env = SlurmEnvironment(name="sl-planted", python=bare_python, gpus_per_node=0, poll_interval=1,  # type: ignore[arg-type]
                           results_dir=str(tmp_path / "res"), sbatch_options=["--hold"],
                           env={"OMP_NUM_THREADS": "1"})
    task = Task(Cell(env, {"model": "mlp", "precision": "fp32", "batch_size": 8, "dataset": "synthetic",  # type: ignore[arg-type]
                           "device": "cpu"}, RunSettings(iterations=3, warmup=1, repeats=1, timeout=120)), 0)
    victim = tmp_path / "victim.txt"
    victim.write_text("someone else's\n")
    folder = tmp_path / "theirs"
    folder.mkdir()
    with Store(tmp_path / "m.db") as store:
        ctx = RunContext(run_id="planted", workdir=tmp_path, wait=False, store=store)
        with SlurmBackend(env, ctx) as backend:
            backend.run([task], lambda t, o: None)
        (job,) = store.open_jobs("slurm").values()
        res = tmp_path / "res" / "planted"
        for name in (f"out/{task.id}.done.tmp", f"out/{task.id}.err.tmp", f"work/{task.id}.rank0.log"):
            (res / name).symlink_to(victim)
        (res / "out" / f"{task.id}.out").symlink_to(folder, target_is_directory=True)
        subprocess.run(["scontrol", "release", str(job.job).split("_")[0]], check=True, timeout=30)
        got: dict[str, Outcome] = {}
        deadline = time.time() + 180
        while task.id not in got:
            assert time.time() < deadline, "not collected within 180 s"
            with SlurmBackend(env, RunContext(run_id="collect", workdir=tmp_path, submit=False, store=store)) as b:
                b.run([task], lambda t, o: got.setdefault(t.id, o))
            time.sleep(1)
    outcome = got[task.id]
    assert outcome.status is Status.OK, f"{outcome.reason}\n{outcome.log_tail}"
    assert victim.read_text() == "someone else's\n" and list(folder.iterdir()) == []
    assert not (res / "out" / f"{task.id}.out").is_symlink() and (res / "out" / f"{task.id}.done").is_file()
