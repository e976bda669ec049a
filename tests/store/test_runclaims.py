"""A run's side of the claim protocol, `RunClaims` (runner/store/runclaims.py): the verbs the run loop calls, and that
the run loop calls nothing else of the protocol. Other runs are played as tests/store/test_claims.py plays them."""

from __future__ import annotations

import ast
import threading
import time
from pathlib import Path

import pytest

from runner.domain.cells import Task
from runner.store import Holder, Store, StoreFull
from runner.store import liveness as store_mod
from tests.store.test_claims import NEEDS, M, hold, ok, other_run

ROOT = Path(__file__).resolve().parents[2]


def test_take_record_held_and_end(tmp_path: Path) -> None:
    cells = M.cells()
    theirs, dead, stored, free = Task(cells[0], 0), Task(cells[0], 1), Task(cells[1], 0), Task(cells[1], 1)
    with Store(tmp_path / "r.db") as store:
        other_run(store, "other")
        hold(store, "other", theirs)
        other_run(store, "gone")
        hold(store, "gone", dead)
        store.add("old", stored, ok())
        claims = store.begin_run("mine", None, "claims", [], NEEDS)
        # Its heartbeat stops after this run began (begin_run reaps the runs dead by then): take takes it over.
        store.db.execute("UPDATE holders SET heartbeat=? WHERE run_id='gone'", (time.time() - store_mod.LEASE_S - 1,))
        taken = claims.take([theirs, dead, stored, free])
        assert [t.id for t in taken.mine] == [dead.id, free.id] and [t.id for t in taken.gone] == [stored.id]
        assert list(taken.held) == [theirs.id] and taken.held[theirs.id][1].run_id == "other"
        assert [h.run_id for h in taken.taken_over] == ["gone"]
        assert set(claims.held(c.key for c in cells)) == {(theirs.cell.key, 0)}  # its own claims are not "held"
        assert not claims.record(theirs, ok()), "another live run holds it: not stored"
        assert claims.record(free, ok())
        assert [tuple(r) for r in store.db.execute("SELECT cell_key, repeat FROM claims WHERE run_id='mine'")] == \
            [(dead.cell.key, 1)]
        claims.end("complete")
        assert store.db.execute("SELECT COUNT(*) FROM claims WHERE run_id='mine'").fetchone()[0] == 0
        assert {r.run_id: r.status for r in store.runs()}["mine"] == "complete"


def test_a_dead_run_found_by_any_check_is_said_taken_over(tmp_path: Path) -> None:
    """A run killed while it measured here holds a claim with this machine's mark. The check for this machine's turn
    (or begin_run's reaping) may meet it dead first and release its claims: the run that then measures its repeat
    said nothing ('ended without storing its repeats' was missing from a CI run of the two-process test)."""
    cells = M.cells()
    first, other = Task(cells[0], 0), Task(cells[1], 1)
    with Store(tmp_path / "r.db") as store:
        other_run(store, "killed", host="vm")
        store.db.execute("INSERT INTO claims (cell_key, repeat, run_id, claimed_at, machine) VALUES (?, ?, 'killed', "
                         "?, ?)", (first.cell.key, first.repeat, time.time(), store_mod.MACHINE))
        claims = store.begin_run("mine", None, "claims", [], NEEDS, poll_s=0.05)
        store.db.execute("UPDATE holders SET heartbeat=? WHERE run_id='killed'", (time.time() - store_mod.LEASE_S - 1,))
        taken = claims.take([other], here=True)  # this machine's turn: the dead run is met here, and released
        assert [t.id for t in taken.mine] == [other.id] and [h.run_id for h in taken.taken_over] == ["killed"]
        again = claims.take([first], here=True)  # its repeat: free now, and said once
        assert [t.id for t in again.mine] == [first.id] and again.taken_over == []
        claims.end("complete")
    with Store(tmp_path / "r.db") as store:  # begin_run's reaping is said at the first take as well
        other_run(store, "also-killed", heartbeat=time.time() - store_mod.LEASE_S - 1)
        hold(store, "also-killed", Task(cells[0], 2))
        claims = store.begin_run("next", None, "claims", [], NEEDS)
        assert [h.run_id for h in claims.take([Task(cells[0], 3)]).taken_over] == ["also-killed"]
        claims.end("complete")


def test_a_repeat_measured_here_waits_inside_take_for_this_machines_turn(tmp_path: Path) -> None:
    cells = M.cells()
    with Store(tmp_path / "r.db") as store:
        other_run(store, "beside", host="container-2")
        store.db.execute("INSERT INTO claims (cell_key, repeat, run_id, claimed_at, machine) VALUES (?, 7, 'beside', ?, ?)",
                         (cells[0].key, time.time(), store_mod.MACHINE))
    told: list[Holder] = []

    def beside_ends() -> None:
        time.sleep(0.4)
        with Store(tmp_path / "r.db") as other:
            other.release("beside", [Task(cells[0], 7)])

    ender = threading.Thread(target=beside_ends)
    ender.start()
    with Store(tmp_path / "r.db") as store:
        claims = store.begin_run("mine", None, "claims", [], NEEDS, poll_s=0.05, on_machine_busy=told.append)
        begun = time.time()
        taken = claims.take([Task(cells[1], 0)], here=True)
        waited = time.time() - begun
        claims.end("complete")
    ender.join()
    assert [t.id for t in taken.mine] == [Task(cells[1], 0).id] and waited >= 0.3
    assert told and {h.run_id for h in told} == {"beside"}


def test_abandon_leaves_a_full_disk_to_the_error_being_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Store(tmp_path / "r.db") as store:
        claims = store.begin_run("mine", None, "claims", [], NEEDS)

        def full(run_id: str, status: str) -> None:
            raise StoreFull("disk full")

        monkeypatch.setattr(store, "finish_run", full)
        claims.abandon()  # says nothing: the error that made the run fail is the one to show
        with pytest.raises(StoreFull):
            claims.end("interrupted")  # an end the run reports itself does say it
        monkeypatch.undo()
        claims.end("failed")
        assert {r.run_id: r.status for r in store.runs()}["mine"] == "failed"


PROTOCOL = {"claim", "record", "release", "start_run", "finish_run", "calibrations", "reap", "add"}


def test_the_run_loop_reaches_the_protocol_only_through_begin_run() -> None:
    """execute.py calls no step of the protocol on the store: only `begin_run`, and reads."""
    tree = ast.parse((ROOT / "runner" / "execution" / "execute.py").read_text())
    used = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name | ast.Attribute)
            and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) == "store"}
    assert "begin_run" in used and not used & PROTOCOL, sorted(used)
