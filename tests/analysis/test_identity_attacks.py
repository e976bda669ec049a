"""What else could make a verdict pool repeats a user would not pool by hand (issue 37, a reviewer's list): two stores
with one id, a store copied and both copies measured, an import of an export of an import, a host renamed, the same
store imported from two files, two store ids one of which begins the other in a report."""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from runner.base.errors import ConfigError, StoreError
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.publish import publish
from runner.report import compare_command, load_history, report_command
from runner.store import Store
from runner.store.exchange import imports, store_id
from tests.analysis.test_identity import measured, set_id
from tests.store.synthetic import fill_history


def test_a_store_copied_and_both_copies_measured_is_refused_not_pooled(tmp_path: Path) -> None:
    """The copy keeps the original's id: two machines under one id. Their files cannot both be imported (their rows
    collide), and a site of the two stores refuses them rather than pooling them as one machine."""
    a = measured(tmp_path / "a.db", "alpha", [("local-cpu", 100.0)], seed=1)
    copy = tmp_path / "copy.db"
    shutil.copy(a, copy)
    fill_history(a, "alpha", "AMD EPYC", runs=1, repeats=4, cells=1, seed=50, first_run=1.75e9)
    fill_history(copy, "beta", "Intel Xeon", runs=1, repeats=4, cells=1, seed=60, first_run=1.75e9, step_at=0, step=0.5)
    with Store(a, readonly=True) as sa, Store(copy, readonly=True) as sc:
        assert store_id(sa) == store_id(sc)
    export_command(a, tmp_path / "a.jsonl.gz", None, None)
    export_command(copy, tmp_path / "copy.jsonl.gz", None, None)
    import_command(tmp_path / "team.db", [tmp_path / "a.jsonl.gz"])
    with pytest.raises(StoreError, match="already in .* with other content"):
        import_command(tmp_path / "team.db", [tmp_path / "copy.jsonl.gz"])
    with pytest.raises(ConfigError, match="share the store id .* two machines under one id"):
        publish([a, copy], tmp_path / "site")
    # A copy that measured nothing since is the same machine: published together, nothing counts twice.
    backup = tmp_path / "backup.db"
    shutil.copy(a, backup)
    publish([a, backup], tmp_path / "site2")
    assert "repeats" in (tmp_path / "site2" / "index.html").read_text()


def test_an_import_of_an_export_of_an_import_stays_the_first_machines(tmp_path: Path) -> None:
    """A's repeats reach C by way of B: they are A's (its store id), never B's, and C says which store they came by."""
    a = measured(tmp_path / "a.db", "alpha", [("x", 50.0)], seed=1)
    b = measured(tmp_path / "b.db", "beta", [("x", 100.0)], seed=2, first_run=1.7e9 + 9)
    export_command(a, tmp_path / "a.jsonl.gz", None, None)
    import_command(b, [tmp_path / "a.jsonl.gz"])
    export_command(b, tmp_path / "b.jsonl.gz", None, None)
    c = measured(tmp_path / "c.db", "gamma", [("x", 100.0)], seed=3, first_run=1.8e9)
    import_command(c, [tmp_path / "b.jsonl.gz"])
    import_command(c, [tmp_path / "a.jsonl.gz"])  # the same repeats straight from A: already there
    with Store(a, readonly=True) as sa, Store(b, readonly=True) as sb, Store(c, readonly=True) as sc:
        ida, idb = store_id(sa), store_id(sb)
        rows = imports(sc)
    assert {(r["origin"], tuple(r["via"]), r["repeats"]) for r in rows} == {(ida, (idb,), 8), (idb, (), 8)}
    local = json.loads(compare_command(c, "x", f"x@machine:{ida}", "json"))
    assert [m["hosts"] for m in local["machines"]["b"]] == [["alpha"]] and 0.45 < local["pairs"][0]["ratio"] < 0.55
    assert local["machines"]["b"][0]["via"] == [idb]
    md = compare_command(c, "x", f"x@machine:{ida}", "md")
    assert f"by way of store {idb}" in md


def test_a_host_renamed_is_one_machine_and_one_series(tmp_path: Path) -> None:
    box = fill_history(tmp_path / "box.db", "old-name", "AMD EPYC", runs=3, repeats=3, cells=1, seed=1)
    fill_history(box, "new-name", "AMD EPYC", runs=3, repeats=3, cells=1, seed=2, first_run=1.7e9 + 3 * 86400)
    hist = load_history(box)
    assert hist["series"].nunique() == 1 and (hist["boundary"] == "").all() and len(hist) == 6
    out = json.loads(compare_command(box, "host:old-name", "host:new-name", "json"))
    # Paired as one machine (no "across machines" warning), and no change found: 3 repeats of a 2% spread do not
    # show it within ±2% either, so it is undecided rather than passed.
    assert not out["across_machines"] and out["pairs"][0]["decision"] == "undecided"
    assert 0.95 < out["pairs"][0]["ratio"] < 1.05


def test_the_same_store_imported_from_two_files_is_one_machine(tmp_path: Path) -> None:
    a = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=2, repeats=3, cells=1, seed=1)
    con = sqlite3.connect(a)
    first, second = (r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at"))
    con.close()
    export_command(a, tmp_path / "one.jsonl.gz", [first], None)
    export_command(a, tmp_path / "two.jsonl.gz", [second], None)
    export_command(a, tmp_path / "all.jsonl.gz", None, None)
    team = tmp_path / "team.db"
    import_command(team, [tmp_path / "one.jsonl.gz", tmp_path / "two.jsonl.gz", tmp_path / "all.jsonl.gz"])
    with Store(team, readonly=True) as st:
        rows = imports(st)
    assert [(r["file"].rsplit("/", 1)[-1], r["runs"], r["repeats"]) for r in rows] == [
        ("one.jsonl.gz", 1, 3), ("two.jsonl.gz", 1, 3)] and len({r["origin"] for r in rows}) == 1
    hist = load_history(team)
    assert hist["series"].nunique() == 1 and len(hist) == 2  # one machine's history, both runs


def test_a_report_never_merges_two_machines_whose_ids_share_a_prefix(tmp_path: Path) -> None:
    a = measured(tmp_path / "a.db", "alpha", [("local-cpu", 100.0)], seed=1)
    b = measured(tmp_path / "b.db", "beta", [("local-cpu", 50.0)], seed=2, first_run=1.7e9 + 5)
    set_id(a, "abcd1234")
    set_id(b, "abcd1234-x")
    for src in (a, b):
        export_command(src, src.with_suffix(".jsonl.gz"), None, None)
        import_command(tmp_path / "team.db", [src.with_suffix(".jsonl.gz")])
    written = report_command(tmp_path / "team.db", formats=["md"], out=tmp_path / "report")
    text = next(p for p in written if p.name == "report.md").read_text()
    assert "local-cpu · AMD EPYC (2 CPUs) @abcd1234 " in text and "local-cpu · AMD EPYC (2 CPUs) @abcd1234-" in text
    assert "more than one definition" not in text  # the other machine is not hidden as an older definition


def test_an_older_export_imported_after_a_newer_one_does_not_bring_back_a_re_run_repeat(tmp_path: Path) -> None:
    """B measures a and b, then re-runs b's repeats (`--force`); its two runs are exported apart and arrive in the
    other order (nightly exports, one late). The newest row of a repeat is the newest in the store that measured
    it, never the last file imported: A's verdict is B's."""
    from tests.analysis.helpers import rows_for, store_of

    b = store_of(tmp_path / "b.db", [
        *rows_for("ka", [100.0, 101.0, 99.0], run_id="20260101-000000-aaaaaa", start=1000.0, environment="a"),
        *rows_for("kb", [100.0, 102.0, 98.0], run_id="20260101-000000-aaaaaa", start=1010.0, environment="b"),
        *rows_for("kb", [200.0, 202.0, 198.0], run_id="20260102-000000-bbbbbb", start=2000.0, environment="b")])
    set_id(b, "b0b0b0b0b0b0")
    export_command(b, tmp_path / "old.jsonl.gz", ["20260101-000000-aaaaaa"], None)
    export_command(b, tmp_path / "new.jsonl.gz", ["20260102-000000-bbbbbb"], None)
    there = json.loads(compare_command(b, "a", "b", "json"))
    for order in (["new", "old"], ["old", "new"]):
        a = tmp_path / f"{order[0]}-first.db"
        for name in order:  # one command each: the order files arrive in
            import_command(a, [tmp_path / f"{name}.jsonl.gz"])
        here = json.loads(compare_command(a, "a@machine:b0b0b0b0b0b0", "b@machine:b0b0b0b0b0b0", "json"))
        assert [(p["a_mean"], p["b_mean"], p["verdict"]) for p in here["pairs"]] == [
            (p["a_mean"], p["b_mean"], p["verdict"]) for p in there["pairs"]], order
        assert here["pairs"][0]["b_mean"] == pytest.approx(200.0)
        with Store(a, readonly=True) as sa:
            assert sorted(r.metrics["throughput"] for r in sa.rows() if r.environment == "b") == [198.0, 200.0, 202.0]
            assert {s.value for s in sa.latest_statuses([k for k in {r.cell_key for r in sa.rows()}]).values()} == {"ok"}


def test_a_stores_id_does_not_change_when_a_later_run_reads_an_earlier_clock(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A store written before ids were kept in it has the id made from its first run. A run whose clock reads
    earlier (a clock set back) would have made it another machine: its exports two stores, its own repeats
    imported back as a stranger's. The id is kept by the first run that sees it."""
    from types import SimpleNamespace

    from runner.store import runs

    first = time.time() - 3600
    a = measured(tmp_path / "a.db", "alpha", [("x", 100.0)], seed=1, first_run=first)
    with Store(a, readonly=True) as sa:
        before = store_id(sa)
        assert sa.db.execute("SELECT value FROM meta WHERE key='store_id'").fetchone() is None
    export_command(a, tmp_path / "first.jsonl.gz", None, None)
    with Store(a) as sa:
        monkeypatch.setattr(runs, "time", SimpleNamespace(time=lambda: first - 86400))  # the clock set back a day
        sa.start_run("20260101-000000-cccccc", "m.yaml", "m", ["run"])
        monkeypatch.undo()
        sa.finish_run("20260101-000000-cccccc", "complete")
        assert store_id(sa) == before
    export_command(a, tmp_path / "second.jsonl.gz", None, None)
    with Store(a, readonly=True) as sa:
        own = len(list(sa.rows(latest_only=False)))
    import_command(a, [tmp_path / "first.jsonl.gz"])  # its own repeats are never a stranger's: already here
    import_command(tmp_path / "team.db", [tmp_path / "first.jsonl.gz"])
    import_command(tmp_path / "team.db", [tmp_path / "second.jsonl.gz"])  # the same repeats: already there
    with Store(a, readonly=True) as sa, Store(tmp_path / "team.db", readonly=True) as st:
        assert len(list(sa.rows(latest_only=False))) == own and not imports(sa)
        assert {i["origin"] for i in imports(st)} == {before}
        assert len(list(st.rows(latest_only=False))) == own
