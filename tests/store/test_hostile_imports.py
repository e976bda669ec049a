"""An import holds a repeat to the rules a store's own repeats keep: names as a matrix.yaml may spell them (no
control character), times no further ahead than a host's clock may be (a run from the future would be every
later command's latest run), whole numbers a store can keep, and an `ok` repeat's figures finite and within
their metric's domain. Each is refused in one line, the store unchanged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runner.base.errors import StoreError
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.store import exchange_file as fmt
from tests.store.synthetic import fill_history
from tests.store.test_exchange import count, rewrite


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    db = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=2, repeats=2, cells=2, seed=7)
    export_command(db, tmp_path / "a.jsonl.gz", None, None)
    return tmp_path / "a.jsonl.gz"


@pytest.mark.parametrize(("change", "words"), [
    ({"environment": "host\x1b[2J"}, "holds a control character"),
    ({"tags": ["nightly\x07"]}, "holds a control character"),
    ({"backend": "docker\nfake line"}, "holds a control character"),
    ({"environment": "  "}, "is blank"),
    ({"started_at": float("nan")}, "started_at nan is not a time"),
    ({"finished_at": float("inf")}, "finished_at inf is not a time"),
    ({"started_at": time.time() + 30 * 86400}, "up to a day ahead"),
    ({"started_at": -1.0}, "started_at -1.0 is not a time"),
    ({"repeat": -3}, "repeat -3 or row"),
    ({"repeat": 10**30}, "not a whole number a store keeps"),
    ({"metrics": {"throughput": float("nan")}}, "throughput is nan"),
    ({"metrics": {"throughput": -5.0}}, "throughput is -5.0"),
    ({"metrics": {"throughput": 0.0}}, "throughput is 0.0"),
    # Admission's bounds (runner/record/admission.py): no machine trains 1.7e308 images a second, and a figure
    # that is not the result's own images over its window was made up after the fact.
    ({"metrics": {"throughput": 1.7e308, "window_s": 1.0, "images": 1.7e308}}, "outside what a machine can reach"),
    ({"metrics": {"throughput": 5e6, "window_s": 1.0, "images": 100.0}}, "not the result's own items over its window"),
    # ... whatever its loss did: a diverged repeat's figures are judged too (it would be plotted by a site).
    ({"metrics": {"throughput": 1e300, "window_s": 1.0, "images": 1e300, "losses": [2.0, None]}},
     "outside what a machine can reach"),
])
def test_a_repeat_a_store_would_never_hold_is_refused_and_nothing_imported(
        exported: Path, tmp_path: Path, change: dict[str, object], words: str) -> None:
    bad = tmp_path / "bad.jsonl.gz"
    rewrite(exported, bad, change)
    with pytest.raises(StoreError, match=words):
        import_command(tmp_path / "c.db", [bad])
    assert not (tmp_path / "c.db").exists() or count(tmp_path / "c.db") == 0


def test_a_run_from_the_future_is_refused(exported: Path, tmp_path: Path) -> None:
    import gzip
    import json
    lines = [json.loads(x) for x in gzip.decompress(exported.read_bytes()).splitlines()[:-1]]
    header = {k: v for k, v in lines[0].items() if k not in ("kind", "format", "schema")}
    records = lines[1:]
    run = next(r for r in records if r["kind"] == "run")
    run["started_at"] = 4.1e9  # the year 2099: `latest` for every later command
    fmt.write(tmp_path / "future.jsonl.gz", header, records)
    with pytest.raises(StoreError, match="started_at 4100000000.0 is not a time up to a day ahead"):
        import_command(tmp_path / "c.db", [tmp_path / "future.jsonl.gz"])


def test_a_failed_repeat_without_its_figure_is_still_imported(exported: Path, tmp_path: Path) -> None:
    other = tmp_path / "failed.jsonl.gz"
    rewrite(exported, other, {"status": "failed", "reason": "oom", "metrics": {"throughput": None}})
    import_command(tmp_path / "c.db", [other])
    assert count(tmp_path / "c.db") == 8


def test_a_run_said_to_be_this_stores_own_that_it_never_had_is_refused(tmp_path: Path) -> None:
    from runner.store import Store
    from runner.store.exchange import store_id
    db = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=1, repeats=2, cells=1, seed=7)
    with Store(db) as store:
        mine, latest = store_id(store), store.resolve_run(None)
    assert mine is not None  # any file exported from this store names its id
    fmt.write(tmp_path / "f.jsonl.gz", {"source": {"store": mine}}, [
        {"kind": "run", "run_id": "20991231-000000-abcdef", "origin": mine, "started_at": time.time() + 3600,
         "status": "complete"}])
    with pytest.raises(StoreError, match="which has no such run"):
        import_command(db, [tmp_path / "f.jsonl.gz"])
    with Store(db) as store:
        assert store.resolve_run(None) == latest


def test_a_file_of_this_stores_own_runs_imported_back_changes_nothing(tmp_path: Path) -> None:
    db = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=2, repeats=2, cells=1, seed=7)
    export_command(db, tmp_path / "own.jsonl.gz", None, None)
    before = count(db), count(db, "SELECT COUNT(*) FROM runs")
    import_command(db, [tmp_path / "own.jsonl.gz"])
    assert (count(db), count(db, "SELECT COUNT(*) FROM runs")) == before
