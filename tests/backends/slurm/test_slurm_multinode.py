"""Multi-node runs and faults against the real namespaced cluster (partition `multi`, node1..node3).

Each node is its own network and UTS namespace (scripts/slurm-nodes.sh): its own hostname and
address, so gloo's rendezvous crosses the bridge as on a real cluster. Everything goes through the
CLI (`matrix run`, `--no-wait`, `matrix collect`) with its own database and workdir, and each fault
ends with a resume that must submit only what is missing.

Order matters and is kept: the TIMEOUT job is submitted first so that its ~80 s limit runs while
the other tests do; the node kill and the controller restart come after the runs that need all nodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runner.store import Store
from tests.backends.slurm.test_slurm_cli import cli, queued
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slurm

NODES_SCRIPT = ROOT / "scripts" / "slurm-nodes.sh"
PARTITION = "multi"
# These tests kill, drain and restart parts of the one cluster on this machine: two test sessions
# running them at once (several checkouts, one machine) would fail each other's jobs.
LOCK = Path("/run/lock/matrix-slurm-multinode-tests.lock")
LOCK_WAIT_S = 900.0

MATRIX = """
name: multi-{name}
environments:
  - name: {name}
    backend: slurm
    partition: multi
    python: {python}
    gpus_per_node: 0
    poll_interval: 1
    time: "{time}"
    sbatch_options: {options}
    env: {{OMP_NUM_THREADS: "1"}}
    tags: [slurm, multi-node]
axes:
  model: [mlp]
  precision: [fp32]
  batch_size: [{batch}]
  device: [cpu]
  threads: [1]
  nodes: {nodes}
  gpus: {gpus}
run: {{iterations: {iterations}, warmup: 1, repeats: {repeats}, timeout: 300}}
"""


@dataclass
class Matrix:
    """One matrix file with its own database and workdir, driven through the CLI."""

    root: Path

    @property
    def common(self) -> list[str]:
        return ["-m", str(self.root / "m.yaml"), "--db", "r.db", "--workdir", "w"]

    def run(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return cli("run", *self.common, *extra, cwd=self.root, check=check)

    def collect(self) -> subprocess.CompletedProcess[str]:
        return cli("collect", *self.common, cwd=self.root, check=False)

    def rows(self) -> list[dict[str, object]]:
        """Every stored repeat, superseded ones too (a resumed repeat is a second row)."""
        db = self.root / "r.db"
        if not db.exists():
            return []
        with Store(db, create=False) as store:
            return [r.columns() for r in store.rows(latest_only=False)]  # the stored columns, to assert on

    def submitted(self) -> dict[str, dict[str, object]]:
        """The array tasks the store says are submitted and not yet collected (read without writing)."""
        db = self.root / "r.db"
        if not db.exists():
            return {}
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
            try:
                found = conn.execute("SELECT task_key, task_id, job, idx FROM batch_jobs "
                                     "WHERE backend='slurm' AND closed_at IS NULL").fetchall()
            except sqlite3.OperationalError:  # no table yet
                return {}
        return {key: {"task": task, "job": job, "index": idx} for key, task, job, idx in found}

    def run_dirs(self) -> list[Path]:
        base = self.root / "w" / "slurm"
        return sorted(p for p in base.iterdir() if p.is_dir()) if base.exists() else []

    def collect_until(self, count: int, within: float) -> list[dict[str, object]]:
        """`matrix collect` until `count` repeats are stored."""
        deadline = time.time() + within
        while len(self.rows()) < count:
            assert time.time() < deadline, f"not collected within {within:.0f} s: {self.submitted()}"
            time.sleep(2)
            self.collect()
        return self.rows()


def make(tmp_path: Path, python: str, name: str, *, nodes: list[int], gpus: list[int] | None = None,
         iterations: int = 5, repeats: int = 1, batch: int = 16, time_limit: str = "10",
         options: list[str] | None = None) -> Matrix:
    root = tmp_path / name
    root.mkdir()
    (root / "m.yaml").write_text(MATRIX.format(
        name=name, python=python, nodes=nodes, gpus=gpus or [1], iterations=iterations, repeats=repeats,
        batch=batch, time=time_limit, options=json.dumps(options or [])))
    return Matrix(root)


def slurm_text(*args: str) -> str:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30).stdout


def node_states() -> dict[str, str]:
    out = slurm_text("sinfo", "-h", "-N", "-p", PARTITION, "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def wait_nodes_up(within: float = 120) -> None:
    """Every node of the partition takes jobs again (after a kill, a drain or a restart)."""
    deadline = time.time() + within
    while True:
        states = node_states()
        if states and all(s.rstrip("*~#").startswith(("idle", "mix", "alloc")) for s in states.values()):
            return
        assert time.time() < deadline, f"nodes not back within {within:.0f} s: {states}"
        for node, state in states.items():
            if state.startswith(("down", "drain")):
                subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                               capture_output=True, timeout=30)
        time.sleep(2)


def job_state(job_id: str) -> tuple[str, str]:
    """(state, node list) of one array task from the controller, which does not lag like sacct."""
    out = slurm_text("squeue", "-h", "-j", job_id, "-o", "%T %N").split()
    return (out[0], out[1] if len(out) > 1 else "") if out else ("", "")


def wait_running(job_id: str, within: float = 120) -> str:
    deadline = time.time() + within
    while True:
        state, nodes = job_state(job_id)
        if state == "RUNNING":
            return nodes
        assert time.time() < deadline, f"job {job_id} not running within {within:.0f} s (state {state!r})"
        time.sleep(1)


def wait_file(path: Path, text: str, within: float = 120) -> None:
    """Until `path` exists and holds `text`: the ranks got past their rendezvous into training."""
    deadline = time.time() + within
    while not (path.exists() and text in path.read_text(errors="replace")):
        assert time.time() < deadline, f"{path} never said {text!r}"
        time.sleep(1)


def job_ids(m: Matrix) -> list[str]:
    return [f"{r['job']}_{r['index']}" for r in m.submitted().values()]


@contextlib.contextmanager
def exclusive(path: Path, within: float) -> Iterator[None]:
    """Hold an exclusive lock on `path`, waiting up to `within` seconds for another holder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        deadline = time.time() + within
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                assert time.time() < deadline, f"another test session held {path} for {within:.0f} s"
                time.sleep(2)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def multi(bare_python: str) -> Iterator[str]:
    """Partition `multi` with at least 3 nodes taking jobs, for this module alone; else skip (fail in CI)."""
    states = node_states()
    require(len(states) >= 3, f"no partition {PARTITION!r} with 3 nodes (sinfo: {states}); start it with "
                              "`sudo scripts/slurm-up.sh` (make services)")
    with exclusive(LOCK, LOCK_WAIT_S):
        try:
            wait_nodes_up(within=60)
        except AssertionError as e:
            require(False, str(e))
        yield bare_python


@pytest.fixture(scope="module")
def timeout_matrix(multi: str, tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    """Submitted first, collected last: a 2-node job that cannot finish in its 1-minute limit."""
    m = make(tmp_path_factory.mktemp("timeout"), multi, "timeout", nodes=[2], iterations=10_000_000,
             time_limit="1", options=["--nodelist=node1,node2"])
    m.run("--no-wait")
    return m


def test_ddp_runs_one_rank_per_slot_across_the_nodes(multi: str, timeout_matrix: Matrix, tmp_path: Path) -> None:
    m = make(tmp_path, multi, "ddp", nodes=[1, 2, 3], gpus=[1, 2])
    m.run()
    stored = m.rows()
    assert len(stored) == 6 and {r["status"] for r in stored} == {"ok"}, [r["reason"] for r in stored]
    for r in stored:
        params, metrics, env = r["params"], r["metrics"], r["env"]
        nodes, per_node = int(params["nodes"]), int(params["gpus"])  # type: ignore[index]
        assert metrics["world_size"] == nodes * per_node  # type: ignore[index]
        assert metrics["throughput"] > 0  # type: ignore[index]
        hostnames = env.get("hostnames") or [env["hostname"]]  # type: ignore[union-attr,index,attr-defined]
        # One rank per slot, node by node: rank r runs on the (r // per_node)-th node of the job.
        assert len(hostnames) == nodes * per_node
        assert len(set(hostnames)) == nodes, hostnames
        assert all(hostnames.count(h) == per_node for h in set(hostnames)), hostnames
        assert set(hostnames) <= {"node1", "node2", "node3"}, "ran on the namespaced nodes"
        assert env["slurm_partition"] == PARTITION  # type: ignore[index]
    # One sbatch per node shape (gpus, nodes): six scripts, each an array of one task.
    scripts = [p for d in m.run_dirs() for p in d.glob("job-*.sh")]
    assert len(scripts) == 6
    again = m.run()
    assert "Nothing to run" in again.stdout and len(m.rows()) == 6


def test_a_drained_node_makes_the_job_wait_and_it_runs_once_the_node_is_back(multi: str, tmp_path: Path) -> None:
    m = make(tmp_path, multi, "drain", nodes=[3])
    subprocess.run(["scontrol", "update", "nodename=node3", "state=drain", "reason=matrix test: drained"],
                   check=True, capture_output=True, timeout=30)
    try:
        m.run("--no-wait")
        (job,) = job_ids(m)
        time.sleep(5)
        assert job_state(job)[0] == "PENDING", "a 3-node job cannot start with a node drained"
        collected = m.collect()
        assert m.rows() == [] and len(m.submitted()) == 1, "the waiting task is kept, not lost or failed"
        assert "not finished yet" in collected.stdout, collected.stdout + collected.stderr
    finally:
        subprocess.run(["scontrol", "update", "nodename=node3", "state=resume"], capture_output=True, timeout=30)
    stored = m.collect_until(1, within=150)
    assert stored[0]["status"] == "ok", stored[0]["reason"]
    assert sorted(stored[0]["env"]["hostnames"]) == ["node1", "node2", "node3"]  # type: ignore[index]
    assert m.submitted() == {}
    assert "Nothing to run" in m.run().stdout


def test_controller_restart_while_jobs_run_and_collect_picks_them_up(multi: str, tmp_path: Path) -> None:
    m = make(tmp_path, multi, "ctld", nodes=[2, 3], iterations=300, batch=32)
    m.run("--no-wait")
    jobs = job_ids(m)
    assert len(jobs) == 2
    for job in jobs:
        wait_running(job)
    restart_slurmctld()
    assert len(queued({j.split("_")[0] for j in jobs})) == 2, "both jobs survived the restart"
    stored = m.collect_until(2, within=240)
    assert {r["status"] for r in stored} == {"ok"}, [r["reason"] for r in stored]
    assert m.submitted() == {}
    assert "Nothing to run" in m.run().stdout


def test_node_killed_mid_job_is_node_fail_and_resume_runs_only_that_repeat(multi: str, tmp_path: Path) -> None:
    # Two repeats of a 2-node cell, one at a time, on node2 and node3; node3 dies under the first.
    # --no-requeue: Slurm would otherwise requeue the job itself (JobRequeue=1), hiding NODE_FAIL.
    m = make(tmp_path, multi, "kill", nodes=[2], iterations=1000, repeats=2,
             options=["--nodelist=node2,node3", "--no-requeue"])
    text = (m.root / "m.yaml").read_text()
    (m.root / "m.yaml").write_text(text.replace("poll_interval: 1", "poll_interval: 1\n    array_parallelism: 1"))
    m.run("--no-wait")
    victim_job = min(job_ids(m), key=lambda j: int(j.split("_")[1]))
    wait_running(victim_job)
    task = next(str(r["task"]) for r in m.submitted().values() if f"{r['job']}_{r['index']}" == victim_job)
    (run_dir,) = m.run_dirs()
    wait_file(run_dir / "work" / f"{task}.rank1.log", "measured iterations")
    time.sleep(2)
    subprocess.run(["bash", str(NODES_SCRIPT), "kill", "node3"], check=True, capture_output=True, timeout=60)
    try:
        deadline = time.time() + 240
        while not m.rows():
            assert time.time() < deadline, f"the killed job was never collected: {job_state(victim_job)}"
            time.sleep(3)
            m.collect()
    finally:
        subprocess.run(["bash", str(NODES_SCRIPT), "start", "node3"], check=True, capture_output=True, timeout=60)
    (victim,) = m.rows()
    env = victim["env"]
    assert env["slurm_job_id"] == victim_job and env["slurm_state"] == "NODE_FAIL", victim  # type: ignore[index]
    assert victim["status"] == "cancelled" and "NODE_FAIL" in str(victim["reason"]), victim["reason"]
    # The other repeat waited for node3 and runs once it is back; nothing was lost.
    stored = m.collect_until(2, within=180)
    assert sorted(str(r["status"]) for r in stored) == ["cancelled", "ok"], [r["reason"] for r in stored]
    assert m.submitted() == {}
    # Resume: only the repeat the node failure cut short runs again.
    wait_nodes_up()
    resumed = m.run()
    stored = m.rows()
    assert len(stored) == 3 and sorted(str(r["status"]) for r in stored) == ["cancelled", "ok", "ok"], \
        resumed.stdout + resumed.stderr
    by_repeat = sorted((int(r["repeat"]), str(r["status"])) for r in stored)  # type: ignore[call-overload]
    other = 1 - int(victim["repeat"])  # type: ignore[call-overload]
    assert by_repeat == sorted([(int(victim["repeat"]), "cancelled"), (int(victim["repeat"]), "ok"),  # type: ignore[call-overload]
                                (other, "ok")]), by_repeat
    assert len(m.run_dirs()) == 2 and len(list(m.run_dirs()[-1].glob("manifest-*.tsv"))) == 1
    manifest = next(m.run_dirs()[-1].glob("manifest-*.tsv")).read_text().splitlines()
    assert len(manifest) == 1, "the resume submitted one task"


def test_job_past_its_time_limit_is_timeout_on_every_node_and_resume_leaves_it(timeout_matrix: Matrix) -> None:
    m = timeout_matrix
    (stored,) = m.collect_until(1, within=240)
    assert stored["status"] == "timeout", stored
    env = stored["env"]
    assert env["slurm_state"] == "TIMEOUT" and env["slurm_nodes"] == "node[1-2]", env  # type: ignore[index]
    assert "DUE TO TIME LIMIT" in str(stored["log_tail"])
    assert m.submitted() == {}
    again = m.run(check=False)
    assert "Nothing to run" in again.stdout, "a timeout is a result: resume does not run it again"
    assert again.returncode == 3, "and the run still says that a selected repeat did not succeed"


def restart_slurmctld() -> None:
    """Stop the controller (SIGTERM, it saves its state) and start it again, as an admin would."""
    pid = Path("/run/slurm/slurmctld.pid").read_text().strip()
    subprocess.run(["kill", pid], check=True, timeout=10)
    deadline = time.time() + 60
    while Path(f"/proc/{pid}").exists():
        assert time.time() < deadline, "slurmctld did not stop"
        time.sleep(0.2)
    subprocess.run(["/usr/sbin/slurmctld"], check=True, timeout=60)
    deadline = time.time() + 60
    while subprocess.run(["scontrol", "ping"], capture_output=True, timeout=30).returncode != 0:
        assert time.time() < deadline, "slurmctld did not come back"
        time.sleep(0.5)
