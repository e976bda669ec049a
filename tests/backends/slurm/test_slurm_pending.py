"""Slurm jobs that cannot start, transient sbatch refusals and sacct's times.

The unit tests use small fake Slurm commands; the `slurm` ones talk to the real one-node Slurm: a
held job, a partition set down with scontrol (a partition of its own, so `debug` keeps working for
everyone else), a request for more nodes than exist, and sacct under a far-away time zone.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.backends.context import RunContext
from runner.backends.slurm import SlurmBackend, SlurmEnvironment, commands, pending
from runner.backends.slurm.commands import PendingTask, SlurmError, parse_sacct
from runner.backends.slurm.state import Watched
from runner.domain.cells import Cell, RunSettings, Task
from runner.domain.outcomes import Outcome, Status
from runner.store import Store
from tests.backends.slurm.test_slurm_units import fake_scripts

MLP = {"model": "mlp", "precision": "fp32", "batch_size": 8, "dataset": "synthetic", "device": "cpu"}
QUICK = RunSettings(iterations=3, warmup=1, repeats=2, timeout=120)


# -- unit: the policy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", ["PartitionDown", "PartitionInactive", "JobHeldUser", "JobHeldAdmin",
                                    "BadConstraints", "PartitionNodeLimit", "PartitionConfig", "InvalidAccount"])
def test_reasons_that_never_clear_block(reason: str) -> None:
    why = pending.blocked(PendingTask("7", 0, reason, "", "debug"), None)
    assert why is not None and why.startswith(reason)


@pytest.mark.parametrize("reason", ["Priority", "Resources", "BeginTime", "Dependency", "QOSMaxJobsPerUserLimit",
                                    "AssocGrpCpuLimit", "None"])
def test_reasons_that_clear_are_waited_on(reason: str) -> None:
    assert pending.blocked(PendingTask("7", 0, reason, "", "debug"), {"n1": "down"}) is None


def test_nodes_not_available_blocks_only_when_no_node_can_free_up() -> None:
    p = PendingTask("7", 0, "ReqNodeNotAvail", "UnavailableNodes:n1", "gpu")
    assert pending.blocked(p, {"n1": "down", "n2": "alloc"}) is None, "n2 frees up when its job ends"
    assert pending.blocked(p, None) is None, "sinfo did not answer: wait"
    why = pending.blocked(p, {"n1": "down", "n2": "drain"})
    assert why is not None and "no node of partition gpu can run jobs" in why and "n2 drain" in why


def test_squeue_reasons_are_read_per_array_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = "41_0|Resources|debug\n41_[1-2]|PartitionDown|down\n42_3|(ReqNodeNotAvail, UnavailableNodes:vm)|gpu\n"
    fake_scripts(tmp_path, monkeypatch, squeue=f"printf %s {shlex.quote(out)}\n")
    got = commands.pending(["41", "42"])
    assert got[("41", 0)].reason == "Resources" and got[("41", 2)].reason == "PartitionDown"
    assert got[("42", 3)] == PendingTask("42", 3, "ReqNodeNotAvail", "UnavailableNodes:vm", "gpu")


# -- unit: sbatch retries -------------------------------------------------------------------------

def counting_sbatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail_times: int, error: str) -> Path:
    count = tmp_path / "calls"
    count.write_text("")
    fake_scripts(tmp_path, monkeypatch, sbatch=textwrap.dedent(f"""\
        echo x >> {shlex.quote(str(count))}
        if [ "$(wc -l < {shlex.quote(str(count))})" -le {fail_times} ]; then
            echo {shlex.quote(error)} >&2; exit 1
        fi
        echo '77;cluster'
    """))
    monkeypatch.setattr(commands, "SBATCH_BACKOFF_S", 0.01)
    return count


def test_a_transient_sbatch_refusal_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = counting_sbatch(tmp_path, monkeypatch, 2, "sbatch: error: Batch job submission failed: "
                            "Socket timed out on send/recv operation")
    said: list[str] = []
    assert commands.sbatch(tmp_path / "job.sh", say=said.append) == "77"
    assert count.read_text().count("x") == 3 and len(said) == 2 and "trying again" in said[0]


def test_a_final_sbatch_refusal_is_not_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = counting_sbatch(tmp_path, monkeypatch, 9, "sbatch: error: Batch job submission failed: "
                            "Invalid partition name specified")
    with pytest.raises(SlurmError, match="Invalid partition name") as caught:
        commands.sbatch(tmp_path / "job.sh")
    assert not caught.value.transient and count.read_text().count("x") == 1


# -- unit: times ----------------------------------------------------------------------------------

def test_sacct_is_asked_for_epoch_seconds_in_utc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = tmp_path / "env"
    fake_scripts(tmp_path, monkeypatch, sacct=f'echo "$SLURM_TIME_FORMAT $TZ" > {shlex.quote(str(seen))}\n'
                 "echo '5_0|COMPLETED|0:0|00:00:05|1767261600|1767261605|vm'\n")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")  # a user's own preference must not leak in
    monkeypatch.setenv("TZ", "Pacific/Chatham")
    time.tzset()
    try:
        row = commands.sacct(["5"])[("5", 0)]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert seen.read_text().split() == ["%s", "UTC"]
    assert (row.start, row.end) == (1767261600.0, 1767261605.0)


def test_iso_times_without_a_zone_are_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        row = parse_sacct("5_0|COMPLETED|0:0|00:00:05|2026-01-01T10:00:00|2026-01-01T10:00:05|vm\n")[("5", 0)]
    finally:
        monkeypatch.undo()
        time.tzset()
    assert row.start == 1767261600.0, "2026-01-01T10:00:00 UTC, whatever this process's zone"


# -- unit: the poll cancels what is blocked, after blocked_after ----------------------------------

def test_a_blocked_task_is_cancelled_after_blocked_after_and_not_started(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cancelled = tmp_path / "scancel"
    fake_scripts(tmp_path, monkeypatch, sacct="echo '41_3|PENDING|0:0|00:00:00|Unknown|Unknown|None'\n",
                 squeue="echo '41_3|PartitionDown|down'\n",
                 scancel=f'echo "$@" > {shlex.quote(str(cancelled))}\n')
    env = SlurmEnvironment(name="u", gpus_per_node=0, blocked_after=30)
    with Store(tmp_path / "m.db") as store:
        b = SlurmBackend(env, RunContext(run_id="r1", workdir=tmp_path, store=store))
        w = Watched(Task(Cell(env, MLP, QUICK), 0), "k", "41", 3, b.results_dir, time.time(), "r1")
        b.state.add([w])
        watch = {w.key: w}
        got: list[Outcome] = []
        b._poll(watch, lambda t, o: got.append(o))
        assert got == [] and not cancelled.exists() and w.pending_reason == "PartitionDown", "said, not cancelled yet"
        w.blocked_since = time.time() - 31
        b._poll(watch, lambda t, o: got.append(o))
        assert cancelled.read_text().split() == ["41_[3]"] and watch == {}
        (outcome,) = got
        assert outcome.status is Status.NOT_STARTED and "PartitionDown" in outcome.reason
        assert outcome.env["slurm_state"] == "PENDING" and outcome.env["slurm_job_id"] == "41_3"
        assert store.open_jobs("slurm") == {}


# -- the real Slurm -------------------------------------------------------------------------------

def scontrol(*args: str) -> None:
    subprocess.run(["scontrol", *args], check=True, capture_output=True, text=True, timeout=30)


def squeue_ids(job: str) -> list[str]:
    return subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i"], capture_output=True, text=True,
                          timeout=30).stdout.split()


def run_env(env: SlurmEnvironment, tmp_path: Path, tasks: list[Task], within: float = 90) -> list[Outcome]:
    got: list[Outcome] = []
    started = time.time()
    with Store(tmp_path / "m.db") as store:
        with SlurmBackend(env, RunContext(run_id=f"r-{uuid.uuid4().hex[:6]}", workdir=tmp_path, store=store)) as b:
            b.run(tasks, lambda t, o: got.append(o))
        assert store.open_jobs("slurm") == {}, "nothing is left to collect"
    assert time.time() - started < within, "the run stopped waiting"
    return got


@pytest.fixture
def down_partition(slurm: None) -> Iterator[str]:
    """A partition of its own on this machine's node, created DOWN; deleted afterwards."""
    node = subprocess.run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N"], capture_output=True, text=True,
                          timeout=30).stdout.split()[0]
    name = f"matrix-down-{os.getpid()}"
    scontrol("create", f"PartitionName={name}", f"Nodes={node}", "State=DOWN")
    try:
        yield name
    finally:
        subprocess.run(["scancel", "-p", name], capture_output=True, timeout=30)
        scontrol("delete", f"PartitionName={name}")


@pytest.mark.slurm
def test_a_partition_down_is_said_cancelled_and_retried_by_the_next_run(bare_python: str, down_partition: str,
                                                                        tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text(textwrap.dedent(f"""
        name: down
        environments:
          - {{name: sl, backend: slurm, python: {bare_python}, partition: {down_partition}, gpus_per_node: 0,
             poll_interval: 1, blocked_after: 2, env: {{OMP_NUM_THREADS: "1"}}}}
        axes: {{model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}}
        run: {{iterations: 3, warmup: 1, repeats: 2, timeout: 120}}
    """))
    cli = [sys.executable, "-m", "runner.cli", "run", "-m", str(m), "--db", "r.db"]
    first = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    said = first.stdout + first.stderr
    assert "pends (2 tasks): PartitionDown" in said and "cannot start" in said, said
    with Store(tmp_path / "r.db", create=False) as store:
        rows = [r.columns() for r in store.rows()]
        assert [r["status"] for r in rows] == ["not_started"] * 2, said
        assert "PartitionDown" in str(rows[0]["reason"]) and rows[0]["env"]["slurm_reason"].startswith("PartitionDown")
        job = str(rows[0]["env"]["slurm_job_id"]).split("_")[0]
    assert squeue_ids(job) == [], "the blocked job was cancelled"
    scontrol("update", f"PartitionName={down_partition}", "State=UP")
    second = subprocess.run(cli, cwd=tmp_path, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    with Store(tmp_path / "r.db", create=False) as store:
        assert [r.status for r in store.rows()] == ["ok"] * 2, second.stdout + second.stderr


@pytest.mark.slurm
def test_a_held_job_is_not_waited_for_forever(bare_python: str, tmp_path: Path) -> None:
    env = SlurmEnvironment(name="held", python=bare_python, gpus_per_node=0, poll_interval=1, blocked_after=0,
                           sbatch_options=["--hold"])
    got = run_env(env, tmp_path, [Task(Cell(env, MLP, QUICK), r) for r in range(2)])
    assert [o.status for o in got] == [Status.NOT_STARTED] * 2
    assert all("JobHeldUser" in o.reason and "scancel" in o.reason for o in got)
    job = str(got[0].env["slurm_job_id"]).split("_")[0]
    assert squeue_ids(job) == []


@pytest.mark.slurm
def test_more_nodes_than_the_partition_has_is_not_started(bare_python: str, tmp_path: Path) -> None:
    env = SlurmEnvironment(name="big", python=bare_python, partition="debug", gpus_per_node=0, poll_interval=1,
                           blocked_after=0)
    nodes = len(subprocess.run(["sinfo", "-h", "-N", "-p", "debug", "-o", "%N"], capture_output=True, text=True,
                               timeout=30).stdout.split())
    got = run_env(env, tmp_path, [Task(Cell(env, {**MLP, "nodes": nodes + 1}, QUICK), 0)])
    assert [o.status for o in got] == [Status.NOT_STARTED]
    assert "PartitionConfig" in got[0].reason or "PartitionNodeLimit" in got[0].reason, got[0].reason
