"""The slurm backend against a real Slurm, driven directly with cells, tasks and a list sink.

Everything is submitted at once (`wait=False`) by one module fixture, so the arrays run side by
side; each test then collects its part the way `matrix collect` does (`submit=False`). The one
slow thing is the TIMEOUT: Slurm's 1-minute limit fires after about 80 s.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runner.backends.context import RunContext
from runner.backends.slurm import SlurmBackend, SlurmEnvironment
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store
from tests.backends.slurm.conftest import bench_processes

pytestmark = pytest.mark.slurm

MLP = {"model": "mlp", "precision": "fp32", "batch_size": 16, "dataset": "synthetic", "device": "cpu"}
SHORT = RunSettings(iterations=5, warmup=1, repeats=2, timeout=120)
ENDLESS = RunSettings(iterations=10_000_000, warmup=1, repeats=2, timeout=120)
HOSTILE = "$(touch {m}) `touch {m}` 'q' \"d\" ;touch {m} #"


@dataclass
class Launch:
    workdir: Path
    envs: dict[str, SlurmEnvironment]
    tasks: dict[str, list[Task]]
    marker: Path
    envcheck: Path
    hostile_name: str
    store: Store
    outcomes: dict[str, Outcome] = field(default_factory=dict)

    def records(self) -> dict[str, dict[str, object]]:
        """The jobs submitted and not yet collected, as the store keeps them."""
        return {k: {"task": j.task_id, "job": j.job, "index": j.index}
                for k, j in self.store.open_jobs("slurm").items()}

    def record(self, task: Task) -> dict[str, object]:
        return next(r for r in self.records().values() if r["task"] == task.id)

    def collect(self, env_name: str, tasks: Sequence[Task] | None = None, within: float = 150,
                sink_too: list[tuple[Task, Outcome]] | None = None) -> dict[str, Outcome]:
        """`matrix collect` in a loop: submit nothing, report what finished, until all are in."""
        wanted = list(tasks if tasks is not None else self.tasks[env_name])
        deadline = time.time() + within
        env = self.envs[env_name]
        while True:
            left = [t for t in wanted if t.id not in self.outcomes]
            if not left:
                return {t.id: self.outcomes[t.id] for t in wanted}
            assert time.time() < deadline, f"not collected within {within} s: {[t.id for t in left]}"

            def sink(task: Task, outcome: Outcome) -> None:
                assert task.id not in self.outcomes, f"{task.id} reported twice"
                self.outcomes[task.id] = outcome
                if sink_too is not None:
                    sink_too.append((task, outcome))

            ctx = RunContext(run_id="collect", workdir=self.workdir, submit=False, store=self.store)
            with SlurmBackend(env, ctx) as backend:
                backend.run(left, sink)
            time.sleep(1)


def squeue_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip()


def tasks_of(env: SlurmEnvironment, run: RunSettings, repeats: int = 2, **params: object) -> list[Task]:
    cell = Cell(env, {**MLP, **params}, run)  # type: ignore[arg-type]
    return [Task(cell, r) for r in range(repeats)]


@pytest.fixture(scope="module")
def launch(bare_python: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    workdir = tmp_path_factory.mktemp("slurm")
    store = Store(workdir / "matrix.db")
    hostile_root = tmp_path_factory.mktemp("hostile")
    marker = hostile_root / "pwned"
    hostile = HOSTILE.format(m=shlex.quote(str(marker)))
    # A real interpreter behind a hostile path, so the hostile task must also *work*.
    pydir = hostile_root / f"py {hostile}"
    pydir.mkdir(parents=True)  # the marker path in the value makes nested directories
    (pydir / "python3").symlink_to(bare_python)
    envcheck = hostile_root / "envcheck.txt"
    common = {"gpus_per_node": 0, "poll_interval": 1, "env": {"OMP_NUM_THREADS": "1"}}
    envs = {
        "small": SlurmEnvironment(name="sl-small", python=bare_python, **common),  # type: ignore[arg-type]
        "limits": SlurmEnvironment(name="sl-limits", python=bare_python, time="1", **common),  # type: ignore[arg-type]
        "hostile": SlurmEnvironment(
            name=f"hostile {hostile}", python=str(pydir / "python3"), gpus_per_node=0, poll_interval=1,
            results_dir=str(hostile_root / f"res {hostile}"),
            env={"OMP_NUM_THREADS": "1", "HOSTILE_VALUE": hostile},
            setup=[f'printf %s "$HOSTILE_VALUE" > {shlex.quote(str(envcheck))}']),
    }
    tasks = {
        "small": tasks_of(envs["small"], SHORT) + tasks_of(envs["small"], SHORT, model="mnist_cnn")
        + tasks_of(envs["small"], SHORT, repeats=1, gpus=2),
        "limits": tasks_of(envs["limits"], SHORT) + tasks_of(envs["limits"], ENDLESS),
        "hostile": tasks_of(envs["hostile"], SHORT, repeats=1),
    }
    for name, env in envs.items():
        reported: list[tuple[Task, Outcome]] = []
        ctx = RunContext(run_id=f"launch-{name}", workdir=workdir, wait=False, store=store)
        with SlurmBackend(env, ctx) as backend:
            backend.run(tasks[name], lambda t, o, seen=reported: seen.append((t, o)))
        assert reported == [], f"{name}: nothing should be reported before it ran: {reported}"
    with store:
        yield Launch(workdir, envs, tasks, marker, envcheck, f"matrix-hostile {hostile}", store)


def test_scancel_of_one_array_task_is_stored_cancelled(launch: Launch) -> None:
    victim = launch.tasks["limits"][3]  # the endless cell's second repeat
    rec = launch.record(victim)
    job, index = str(rec["job"]), int(rec["index"])  # type: ignore[call-overload]
    deadline = time.time() + 90
    while (state := squeue_state(f"{job}_{index}")) != "RUNNING":  # the controller: accounting may lag
        assert time.time() < deadline, f"{job}_{index} never ran: {state}"
        time.sleep(1)
    subprocess.run(["scancel", f"{job}_{index}"], check=True, timeout=30)
    outcome = launch.collect("limits", [victim], within=150)[victim.id]
    assert outcome.status is Status.CANCELLED, outcome
    assert f"{job}_{index}" in outcome.reason and outcome.env["slurm_state"] == "CANCELLED"
    assert victim.id not in {r["task"] for r in launch.records().values()}, "collected: out of the state"


def test_small_matrix_lands_in_the_store_one_sbatch_per_shape(launch: Launch, tmp_path: Path) -> None:
    tasks = launch.tasks["small"]
    jobs = {str(launch.record(t)["job"]) for t in tasks}
    assert len(jobs) == 2, f"one array per node shape (gpus 1 and gpus 2), got jobs {jobs}"
    reported: list[tuple[Task, Outcome]] = []
    launch.collect("small", sink_too=reported)
    with Store(tmp_path / "m.db") as store:
        store.start_run("slurm-test", None, "slurm-test", [])
        for task, outcome in reported:
            store.add("slurm-test", task, outcome)
        rows = [r.columns() for r in store.rows()]
    assert len(rows) == len(tasks) == 5
    for row in rows:
        assert row["status"] == "ok", row
        assert row["metrics"]["throughput"] > 0
        assert row["backend"] == "slurm"
        env = row["env"]
        assert env["torch"].startswith("1.13"), "the bare-metal Debian PyTorch ran, not the controller's"
        assert env["slurm_job_id"].split("_")[0] in jobs and env["slurm_job_id"] == env.get("slurm_job_id")
        assert env["python_executable"] == "/usr/bin/python3"
    # Collected tasks leave the state file; workers never touched the database.
    assert not any(r["task"] in {t.id for t in tasks} for r in launch.records().values())


def test_two_process_cpu_ddp_reports_one_global_throughput(launch: Launch) -> None:
    ddp = launch.tasks["small"][4]
    assert ddp.cell.gpus == 2
    outcome = launch.collect("small", [ddp])[ddp.id]
    assert outcome.status is Status.OK, outcome.log_tail
    assert outcome.metrics["world_size"] == 2
    assert outcome.metrics["throughput"] > 0
    results = Path(outcome.env["slurm_results_dir"])
    assert (results / "work" / f"{ddp.id}.rank1.rc").read_text().strip() == "0", "both ranks ran"
    script = next(p for p in results.glob("job-*.sh") if "--ntasks-per-node=2" in p.read_text())
    assert "#SBATCH --gres" not in script.read_text(), "gpus_per_node: 0 asks for no GPUs"


def test_hostile_values_run_nothing_and_arrive_intact(launch: Launch) -> None:
    task = launch.tasks["hostile"][0]
    outcome = launch.collect("hostile")[task.id]
    assert outcome.status is Status.OK, outcome.log_tail
    assert not launch.marker.exists(), "a hostile value was executed by the shell"
    assert launch.envcheck.read_text() == launch.envs["hostile"].env["HOSTILE_VALUE"]
    job = outcome.env["slurm_job_id"]
    name = subprocess.run(["sacct", "-P", "-n", "-X", "-j", job, "--format=JobName%300"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # slurmdbd stores a double quote as a backquote; everything else comes back as written.
    assert name == launch.hostile_name.replace('"', "`"), "sbatch read the quoted job name back exactly"
    assert Path(outcome.env["slurm_results_dir"]).parent == Path(launch.envs["hostile"].results_dir or "")


def test_time_limit_is_timeout_and_the_rest_of_the_array_completes(launch: Launch) -> None:
    got = launch.collect("limits", within=200)
    short0, short1, endless0, endless1 = launch.tasks["limits"]
    assert got[short0.id].status is Status.OK and got[short1.id].status is Status.OK
    assert got[endless1.id].status is Status.CANCELLED
    timeout = got[endless0.id]
    assert timeout.status is Status.TIMEOUT, timeout
    assert "time limit" in timeout.reason and timeout.env["slurm_state"] == "TIMEOUT"
    assert "DUE TO TIME LIMIT" in timeout.log_tail, timeout.log_tail
    assert launch.records() == {}, "everything submitted was collected"


def test_a_job_sbatch_refuses_is_not_started_with_sbatch_words(bare_python: str, tmp_path: Path) -> None:
    env = SlurmEnvironment(name="nopart", python=bare_python, gpus_per_node=0, partition="no-such-partition")
    got: list[tuple[Task, Outcome]] = []
    with Store(tmp_path / "m.db") as store:
        with SlurmBackend(env, RunContext(run_id="r", workdir=tmp_path, store=store)) as backend:
            backend.run(tasks_of(env, SHORT), lambda t, o: got.append((t, o)))
        assert store.open_jobs("slurm") == {}
    assert len(got) == 2 and {o.status for _, o in got} == {Status.NOT_STARTED}
    assert "sbatch refused the job" in got[0][1].reason and "partition" in got[0][1].reason.lower()


def test_a_rank_whose_shell_dies_dies_with_it(bare_python: str, tmp_path: Path) -> None:
    """The job script's shell starts the bench; proctrack/linuxproc (this cluster's, and many others') finds a
    step's processes through their parents, so a bench that outlives that shell escapes the step's end and
    keeps a core busy. Kill the shell as a time limit's SIGKILL would: the bench goes with it."""
    env = SlurmEnvironment(name="sl-tether", python=bare_python, gpus_per_node=0, poll_interval=1,
                           env={"OMP_NUM_THREADS": "1"})
    task = tasks_of(env, ENDLESS, repeats=1)[0]
    with Store(tmp_path / "m.db") as store:
        with SlurmBackend(env, RunContext(run_id="r", workdir=tmp_path, wait=False, store=store)) as backend:
            backend.run([task], lambda t, o: None)
        job = next(iter(store.open_jobs("slurm").values())).job
        try:
            deadline = time.time() + 120
            while not (ranks := bench_processes(tmp_path)):
                assert time.time() < deadline, "the bench never started"
                time.sleep(0.5)
            (pid, shell), = ranks.items()
            assert Path(f"/proc/{shell}/exe").resolve().name == "bash", "the rank's parent is the job's shell"
            time.sleep(3)  # past the bench's start, into its training loop
            os.kill(shell, signal.SIGKILL)
            deadline = time.time() + 10
            while pid in bench_processes(tmp_path):
                assert time.time() < deadline, f"bench {pid} outlived its shell {shell}"
                time.sleep(0.2)
        finally:
            if left := bench_processes(tmp_path):
                for pid in left:
                    os.kill(pid, signal.SIGKILL)
                subprocess.run(["scancel", str(job)], timeout=30)
        got: list[Outcome] = []
        deadline = time.time() + 120
        ctx = RunContext(run_id="collect", workdir=tmp_path, submit=False, store=store)
        while not got:
            assert time.time() < deadline, "the job whose rank died was never collected"
            with SlurmBackend(env, ctx) as backend:
                backend.run([task], lambda t, o: got.append(o))
            time.sleep(1)
    # The job script goes on after its step and publishes what the rank left: a failed repeat, with its log.
    assert got[0].status is Status.FAILED, got[0]
    assert "[bench]" in got[0].log_tail, got[0].log_tail
