"""Claims: runs that share a store share its repeats, and a claim dies with its holder.

Other runs are simulated at one narrow boundary: a `holders` row (the process behind a run) written as
another process or host would write it. The two-process test with real `matrix run`s is
tests/execution/test_concurrent.py.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
from rich.console import Console

from runner import matrix
from runner.backends.base import SequentialBackend
from runner.backends.local import LocalEnvironment
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome, Status
from runner.execution import execute
from runner.store import Store
from runner.store import liveness as store_mod

M = matrix.parse("""
name: claims
environments: [{name: cpu, backend: local}]
axes: {model: [mlp], precision: [fp32, bf16], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: 2}
""")


def ok(tput: float = 100.0) -> Outcome:
    return Outcome(Status.OK, {"schema": 1, "status": "ok", "metrics": {"throughput": tput}}, "", "", 1.0, 2.0)


def other_run(store: Store, run_id: str, *, host: str = "elsewhere", ident: str = "other-kernel", pid: int = 4242,
              pid_start: str | None = None, heartbeat: float | None = None) -> None:
    """A run of another process, as that process writes it."""
    now = time.time()
    store.db.execute("INSERT INTO runs (run_id, schema, started_at, host, status) VALUES (?, 1, ?, ?, 'running')",
                     (run_id, now - 30, host))
    store.db.execute("INSERT INTO holders (run_id, schema, host, ident, pid, pid_start, started_at, heartbeat) "
                     "VALUES (?, 1, ?, ?, ?, ?, ?, ?)", (run_id, host, ident, pid, pid_start, now - 30,
                                                         now if heartbeat is None else heartbeat))


def hold(store: Store, run_id: str, task: Task) -> None:
    store.db.execute("INSERT INTO claims (cell_key, repeat, run_id, claimed_at) VALUES (?, ?, ?, ?)", (task.cell.key, task.repeat, run_id, time.time()))


NEEDS = execute.Want().needs


def test_a_live_holder_keeps_its_repeat_and_a_dead_one_loses_it(tmp_path: Path) -> None:
    task = Task(M.cells()[0], 0)
    with Store(tmp_path / "r.db") as store:
        other_run(store, "other")
        hold(store, "other", task)
        store.start_run("mine", None, "claims", [])
        answer = store.claim("mine", [task], NEEDS)[task.id]
        assert not answer.mine and answer.holder is not None and answer.holder.run_id == "other"
        assert "run other (pid 4242 on elsewhere, started " in answer.holder.describe()
        assert not store.record("mine", task, ok(), NEEDS), "a result of a repeat another live run holds is not stored"
        # Its heartbeat stops: past the lease, the claim is taken over and the run is marked killed.
        store.db.execute("UPDATE holders SET heartbeat=? WHERE run_id='other'", (time.time() - store_mod.LEASE_S - 1,))
        answer = store.claim("mine", [task], NEEDS)[task.id]
        assert answer.mine and answer.taken is not None and answer.taken.run_id == "other"
        assert {r.run_id: r.status for r in store.runs()}["other"] == "killed"
        assert store.record("mine", task, ok(), NEEDS) and store.claims([task.cell.key]) == {}
        # Stored now: nobody claims it again.
        assert not store.claim("other2", [task], NEEDS)[task.id].mine
        store.finish_run("mine", "complete")


def finished_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def zombie_pid() -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(["true"])
    deadline = time.time() + 10
    while store_mod._proc_stat(proc.pid) not in (None,) and store_mod._proc_stat(proc.pid)[0] != "Z":  # type: ignore[index]
        assert time.time() < deadline
        time.sleep(0.01)
    return proc, proc.pid


def test_on_this_host_a_holder_lives_as_long_as_its_process(tmp_path: Path) -> None:
    me = store_mod.this_process()
    zombie, zpid = zombie_pid()
    cases = {
        "alive": (me.pid, me.start, True),
        "ended": (finished_pid(), None, False),
        "reused pid": (me.pid, "1", False),       # the pid now belongs to a process that started later
        "zombie": (zpid, store_mod._proc_start(zpid), False),  # SIGKILLed, not yet reaped by its parent
    }
    try:
        for name, (pid, start, alive) in cases.items():
            # A fresh heartbeat does not keep a dead local process alive; an old one does not kill a live one.
            for beat in (time.time(), time.time() - 10 * store_mod.LEASE_S):
                h = store_mod.Holder("r", me.host, me.ident, pid, start, 0.0, beat, None)
                assert h.alive() is alive, name
    finally:
        zombie.wait()
    # Same host name but another pid namespace (a container) or kernel boot: the heartbeat decides.
    h = store_mod.Holder("r", me.host, "other-ns", me.pid, me.start, 0.0, time.time() - 10 * store_mod.LEASE_S, None)
    assert not h.alive()


def test_a_killed_run_shows_killed_and_its_claims_go_to_the_next_run(tmp_path: Path) -> None:
    me = store_mod.this_process()
    task = Task(M.cells()[1], 1)
    with Store(tmp_path / "r.db") as store:
        other_run(store, "gone", host=me.host, ident=me.ident, pid=finished_pid())
        hold(store, "gone", task)
    with Store(tmp_path / "r.db", readonly=True) as store:
        assert [(r.run_id, r.status) for r in store.runs()] == [("gone", "killed")]
        assert store.claims([task.cell.key]) == {}
    with Store(tmp_path / "r.db") as store:
        assert [t.id for t in execute.todo(M.cells(), store)] == [Task(c, r).id for c in M.cells() for r in range(2)]
        store.start_run("next", None, "claims", [])  # reaps: the killed run is closed, its claims released
        assert store.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        assert store.db.execute("SELECT status FROM runs WHERE run_id='gone'").fetchone()[0] == "killed"
        store.finish_run("next", "complete")


def test_force_and_rerun_failed_share_the_work_with_runs_that_started_before_them() -> None:
    want = execute.Want(rerun_failed=True, force=False, since=10)
    assert want.needs(None) and want.needs(Status.CANCELLED, 50) and want.needs(Status.NOT_STARTED, 50)
    assert want.needs(Status.FAILED, 9) and want.needs(Status.OOM, 9) and not want.needs(Status.OK, 9)
    assert not want.needs(Status.FAILED, 11), "failed again after this run began: not a third time"
    force = execute.Want(force=True, since=10)
    assert force.needs(Status.OK, 10) and not force.needs(Status.OK, 11)


class Quick(SequentialBackend):
    """The local backend's claim and loop, with a repeat that takes no time."""

    kind = "local"
    config = LocalEnvironment
    ran: ClassVar[list[str]] = []

    def run_one(self, task: Task) -> Outcome:
        Quick.ran.append(task.id)
        return ok()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    Quick.ran = []
    monkeypatch.setattr(execute.backends, "get", lambda kind: Quick)
    return Quick.ran


def test_a_run_waits_for_the_repeats_another_run_holds_and_measures_the_rest(
        tmp_path: Path, quick: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    cells = M.cells()
    theirs = [Task(cells[0], 0), Task(cells[1], 1)]
    with Store(tmp_path / "r.db") as store:
        other_run(store, "other")
        for t in theirs:
            hold(store, "other", t)

    def other_finishes() -> None:
        time.sleep(0.5)
        with Store(tmp_path / "r.db") as other:
            for t in theirs:
                assert other.record("other", t, ok(1.0), NEEDS)

    finisher = threading.Thread(target=other_finishes)
    finisher.start()
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(M, cells, store, workdir=tmp_path, console=Console(quiet=True), poll_s=0.05)
        rows = list(store.rows(latest_only=False))
    finisher.join()
    assert sorted(quick) == sorted({Task(c, r).id for c in cells for r in range(2)} - {t.id for t in theirs})
    assert len(rows) == 4 and report.exit_code == 0 and not report.busy
    err = " ".join(capsys.readouterr().err.split())
    assert "2 of them are being measured by run other (pid 4242 on elsewhere" in err
    assert "waiting for 2 repeats that run other" in err


def test_no_wait_and_collect_do_not_wait_and_exit_busy(tmp_path: Path, quick: list[str],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    cells = M.cells()
    with Store(tmp_path / "r.db") as store:
        other_run(store, "other")
        hold(store, "other", Task(cells[0], 0))
        report = execute.run_matrix(M, cells, store, workdir=tmp_path, wait=False, console=Console(quiet=True))
        assert len(quick) == 3 and Task(cells[0], 0).id not in quick
        assert report.exit_code == execute.EXIT_BUSY == 7 and list(report.busy) == ["other"]
        assert store.claims([c.key for c in cells]) == {(cells[0].key, 0): report.busy["other"]}


def test_collect_starts_nothing_here(tmp_path: Path, quick: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with Store(tmp_path / "r.db") as store:
        report = execute.run_matrix(M, M.cells(), store, workdir=tmp_path, submit=False,
                                    console=Console(file=None, quiet=False, force_terminal=False, width=200))
        assert quick == [] and list(store.rows()) == [] and report.run_id is None
    out = capsys.readouterr()
    said = " ".join((out.out + out.err).split())
    assert "collect starts nothing: 4 repeats of environments that run here (cpu) are left to `matrix run`" in said
    assert "Nothing to collect" in said


def test_the_start_line_counts_what_is_stored(tmp_path: Path, quick: list[str],
                                              capsys: pytest.CaptureFixture[str]) -> None:
    adaptive = matrix.parse("""
name: adaptive
environments: [{name: cpu, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: {min: 3, max: 6, target_ci: 1%}}
""")
    (cell,) = adaptive.cells()
    with Store(tmp_path / "r.db") as store:
        for r, tput in enumerate([100.0, 60.0, 140.0]):  # noisy: the rule asks for more
            store.add("old", Task(cell, r), ok(tput))
        execute.run_matrix(adaptive, [cell], store, workdir=tmp_path, console=Console(quiet=True))
    err = " ".join(capsys.readouterr().err.split())
    assert "(3 already stored;" in err and "at most 6 per cell" in err and "0 already stored" not in err
    assert quick and all(int(t.rsplit("-r", 1)[1]) >= 3 for t in quick)
    cells = M.cells()
    with Store(tmp_path / "fixed.db") as store:
        store.add("old", Task(cells[0], 0), ok())
        store.add("old", Task(cells[0], 1), Outcome(Status.OOM, reason="out of memory"))
        execute.run_matrix(M, cells, store, workdir=tmp_path, rerun_failed=True, console=Console(quiet=True))
    err = " ".join(capsys.readouterr().err.split())
    assert "3 of 4 repeats to run (1 already stored, 1 measured again)" in err, err


def test_adaptive_repeats_leave_out_the_numbers_another_run_measures(tmp_path: Path) -> None:
    from runner.execution import adaptive_rounds as schedule
    adaptive = matrix.parse("""
name: adaptive
environments: [{name: cpu, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {iterations: 1, warmup: 0, repeats: {min: 3, max: 8, target_ci: 1%}}
""")
    (cell,) = adaptive.cells()
    with Store(tmp_path / "r.db") as store:
        for r, tput in enumerate([100.0, 60.0, 140.0]):
            store.add("old", Task(cell, r), ok(tput))
        alone = schedule.more_tasks([cell], store)
        other_run(store, "other")
        hold(store, "other", Task(cell, 3))
        (state,) = schedule.states([cell], store)
        shared = schedule.more_tasks([cell], store)
    assert 3 not in state.free and state.in_flight == 1
    assert [t.repeat for t in shared] == [r for r in range(4, 8)][:len(alone) - 1]


def test_one_machine_measures_one_repeat_at_a_time(tmp_path: Path, quick: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Another run measuring on this machine (a container: another host name, the same kernel) makes this one
    wait for its turn; one measuring on another machine does not."""
    cells = M.cells()
    released: list[float] = []
    with Store(tmp_path / "r.db") as store:
        other_run(store, "here-too", host="container-2")
        other_run(store, "far", host="node-9")
        for run_id, machine, repeat in (("here-too", store_mod.MACHINE, 7), ("far", "another-boot-id", 8)):
            store.db.execute("INSERT INTO claims (cell_key, repeat, run_id, claimed_at, machine) VALUES (?, ?, ?, ?, ?)",
                             (cells[0].key, repeat, run_id, time.time(), machine))

    def other_finishes() -> None:
        time.sleep(0.5)
        with Store(tmp_path / "r.db") as other:
            released.append(time.time())
            other.release("here-too", [Task(cells[0], 7)])

    started: list[float] = []
    finisher = threading.Thread(target=other_finishes)
    finisher.start()
    with Store(tmp_path / "r.db") as store:
        original = Quick.run_one
        Quick.run_one = lambda self, task: (started.append(time.time()), original(self, task))[1]  # type: ignore[method-assign]
        try:
            report = execute.run_matrix(M, cells, store, workdir=tmp_path, console=Console(quiet=True), poll_s=0.05)
        finally:
            Quick.run_one = original  # type: ignore[method-assign]
    finisher.join()
    assert report.exit_code == 0 and len(quick) == 4
    assert released and min(started) >= released[0], "nothing was measured while the other run measured here"
    err = " ".join(capsys.readouterr().err.split())
    assert "run here-too (pid 4242 on container-2" in err and "is measuring on this machine" in err
    assert "run far" not in err


PARENT = """
import sys
from pathlib import Path
from runner import matrix
from runner.backends.local import LocalBackend
from runner.domain.cells import Task
from runner.backends.context import RunContext
(cell,) = matrix.parse(
    "environments: [{name: slow, backend: local, python: '%s'}]\\n"
    "axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}\\n" % sys.argv[1]).cells()
with LocalBackend(cell.environment, RunContext(run_id="r", workdir=Path(sys.argv[2]))) as backend:
    backend.run_one(Task(cell, 0))
"""


def test_a_bench_process_dies_with_the_run_that_started_it(tmp_path: Path) -> None:
    """A SIGKILLed `matrix run` leaves no orphan measuring beside the run that takes its repeat over: the
    local backend's bench process (here an interpreter that only sleeps) dies with it."""
    import os
    import signal
    import sys
    slow = tmp_path / "slow-python"
    slow.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    slow.chmod(0o755)
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(slow), str(tmp_path)],
                              cwd=Path(__file__).parents[2])

    def sleepers() -> list[int]:
        found = []
        for pid in os.listdir("/proc"):
            try:
                if pid.isdigit() and int(pid) != parent.pid and str(slow) in Path(f"/proc/{pid}/cmdline").read_text():
                    found.append(int(pid))
            except OSError:
                continue
        return found

    deadline = time.time() + 60
    while not sleepers():
        assert time.time() < deadline and parent.poll() is None, "the backend never started its process"
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    try:
        while sleepers():
            assert time.time() < deadline, "the bench process outlived the run that started it"
            time.sleep(0.05)
    finally:
        for pid in sleepers():
            os.kill(pid, signal.SIGKILL)
