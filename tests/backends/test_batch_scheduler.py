"""A second batch scheduler is its four verbs: this toy one runs every task as a local process (its "job"), and
`BatchBackend` gives it what Slurm has: jobs kept in the store until collected, `--no-wait` then `matrix
collect`, a lost job forgotten, Ctrl-C's cancel (docs/internals.md, "How to add a batch scheduler")."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

import pytest
from rich.console import Console

from runner import backends, matrix
from runner.backends.base import Sink
from runner.backends.batch import BatchBackend, Polled, Watched, state_key
from runner.backends.context import RunContext
from runner.base.errors import BackendError
from runner.domain.cells import EnvironmentBase, Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.store import Store

# The job: sleeps a little (so that a poll can see it queued), then writes its result where collect reads it.
JOB = """
import json, sys, time
time.sleep(float(sys.argv[2]))
json.dump({"status": "ok", "metrics": {"throughput": 100.0 + int(sys.argv[3])}}, open(sys.argv[1] + ".tmp", "w"))
__import__("os").replace(sys.argv[1] + ".tmp", sys.argv[1])
"""


class ProcQueueEnvironment(EnvironmentBase):
    backend: Literal["procqueue"] = "procqueue"
    job_s: float = 0.2


class ProcQueue(BatchBackend):
    """Runs each task as a detached local process; the pid is the job id, a file its result."""

    kind = "procqueue"
    config = ProcQueueEnvironment
    scheduler = "procqueue"
    cancel_tool = "kill"
    poll_interval = 0.05
    env: ProcQueueEnvironment

    def _out(self, w: Watched) -> Path:
        return w.results_dir / f"{w.task.id}.json"

    def submit(self, tasks: Sequence[Task], sink: Sink) -> Iterator[list[Watched]]:
        folder = self.ctx.workdir / "procqueue" / self.ctx.run_id
        folder.mkdir(parents=True, exist_ok=True)
        for task in tasks:
            out = folder / f"{task.id}.json"
            proc = subprocess.Popen([sys.executable, "-c", JOB, str(out), str(self.env.job_s), str(task.repeat)],
                                    start_new_session=True)
            yield [Watched(task, state_key(task), str(proc.pid), 0, folder, time.time(), self.ctx.run_id)]

    def poll(self, watch: Mapping[str, Watched], first: bool) -> Polled:
        polled = Polled()
        for w in watch.values():
            if self._out(w).exists():
                polled.over.append(w)
            elif _running(int(w.job)):
                self.started(w)
            else:
                polled.lost.append(w.key)  # neither running nor a result: `matrix run` submits it again
        return polled

    def collect(self, w: Watched) -> Outcome:
        result = json.loads(self._out(w).read_text())
        return Outcome(Status(result["status"]), result, extra={"backend": self.kind, "job": w.job})

    def cancel(self, watched: Sequence[Watched]) -> list[str]:
        for w in watched:
            try:
                os.kill(int(w.job), signal.SIGTERM)
            except ProcessLookupError:
                pass
        return [w.job for w in watched]


def _running(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)  # our own child: reap it once it is over
        return done == 0
    except ChildProcessError:  # not our child (submitted by an earlier run): is it there at all?
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False


@pytest.fixture(autouse=True)
def procqueue() -> Iterator[None]:
    """The toy scheduler is known only while these tests run: the other tests see the built-in backends."""
    backends.register(ProcQueue)
    yield
    backends.REGISTRY.forget("procqueue")

MATRIX = """
name: toy
environments: [{name: q, backend: procqueue}]
axes: {model: [mlp], precision: [fp32], batch_size: [8, 16], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 2}
"""


def run(m: matrix.Matrix, store: Store, tmp_path: Path, wait: bool = True, submit: bool = True) -> execute.RunReport:
    return execute.run_matrix(m, m.cells(), store, workdir=tmp_path, console=Console(file=io.StringIO()),
                              poll_s=0.05, wait=wait, submit=submit)


def test_a_run_submits_polls_and_collects_every_task(tmp_path: Path) -> None:
    m = matrix.parse(MATRIX)
    with Store(tmp_path / "r.db") as store:
        report = run(m, store, tmp_path)
        assert report.exit_code == execute.EXIT_OK
        rows = list(store.rows())
        assert len(rows) == 4 and {r.status for r in rows} == {"ok"}
        assert sorted(r.metrics["throughput"] for r in rows) == [100.0, 100.0, 101.0, 101.0]
        assert store.open_jobs("procqueue") == {}, "every job collected"
        closed = store.db.execute("SELECT closed_how FROM batch_jobs WHERE backend='procqueue'").fetchall()
        assert [r[0] for r in closed] == ["collected"] * 4


def test_no_wait_leaves_jobs_in_the_store_and_collect_gathers_them(tmp_path: Path) -> None:
    m = matrix.parse(MATRIX)
    with Store(tmp_path / "r.db") as store:
        first = run(m, store, tmp_path, wait=False)
        assert first.pending == 4 and not list(store.rows())
        assert len(store.open_jobs("procqueue")) == 4
        deadline = time.time() + 30
        while len(list(store.rows())) < 4 and time.time() < deadline:
            run(m, store, tmp_path, submit=False)  # `matrix collect`: starts nothing
            time.sleep(0.1)
        assert sorted(r.status for r in store.rows()) == ["ok"] * 4
        assert store.open_jobs("procqueue") == {}


def test_a_lost_job_is_forgotten_and_a_cancelled_one_is_reported(tmp_path: Path) -> None:
    m = matrix.parse(MATRIX.replace("{name: q, backend: procqueue}", "{name: q, backend: procqueue, job_s: 30}"))
    tasks = [Task(c, 0) for c in m.cells()]
    with Store(tmp_path / "r.db") as store:
        backend = ProcQueue(m.environments[0], RunContext("r1", tmp_path, wait=False, store=store))
        backend.run(tasks, lambda t, o: pytest.fail(f"nothing is over yet: {o}"))
        watch = {k: Watched.from_record(next(t for t in tasks if state_key(t) == k), k, rec)
                 for k, rec in store.open_jobs("procqueue").items()}
        first, second = watch.values()
        os.kill(int(first.job), signal.SIGKILL)
        os.waitpid(int(first.job), 0)
        got: list[Outcome] = []
        backend._poll(watch, lambda t, o: got.append(o))
        assert not got and first.key not in watch, "a job gone without a result is lost, not waited for"
        backend._cancel(watch, lambda t, o: got.append(o))
        assert [o.status for o in got] == [Status.CANCELLED]
        assert got[0].reason == f"cancelled with kill (procqueue job {second.job}_0)"
        how = dict(store.db.execute("SELECT task_key, closed_how FROM batch_jobs").fetchall())
        assert how == {first.key: "lost", second.key: "cancelled"}


def test_a_scheduler_name_is_registered_once() -> None:
    with pytest.raises(BackendError, match="'procqueue' is registered twice"):
        backends.register(ProcQueue)
    assert backends.get("procqueue") is ProcQueue
