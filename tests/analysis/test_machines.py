"""Machines as a side of `compare`: `host:NAME` and `machine:HARDWARE|STORE` pair the same cells measured on two
machines and imported into one store, with the compare core's statistics and verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.base.errors import ConfigError
from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.report import compare_command
from tests.store.synthetic import fill_history


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("machines")
    a = fill_history(tmp / "a.db", "alpha", "AMD EPYC", runs=2, repeats=4, cells=3, seed=3)
    b = fill_history(tmp / "b.db", "beta", "Intel Xeon", runs=2, repeats=4, cells=3, seed=3, first_run=1.7e9 + 9,
                     step_at=0, step=1.5)
    export_command(a, tmp / "a.jsonl.gz", None, None)
    export_command(b, tmp / "b.jsonl.gz", None, None)
    import_command(tmp / "c.db", [tmp / "a.jsonl.gz", tmp / "b.jsonl.gz"])
    return tmp / "c.db"


def test_hosts_as_sides(pooled: Path) -> None:
    out = json.loads(compare_command(pooled, "host:alpha", "host:beta", "json"))
    pairs = out["pairs"]
    assert len(pairs) == 3
    assert all(p["verdict"] == "faster" and 1.4 < p["ratio"] < 1.6 for p in pairs)


def test_hardware_and_store_as_sides(pooled: Path, tmp_path: Path) -> None:
    by_hw = json.loads(compare_command(pooled, "machine:Intel Xeon (2 CPUs)", "machine:AMD EPYC (2 CPUs)", "json"))
    assert all(p["verdict"] == "slower" for p in by_hw["pairs"])
    import gzip
    store = json.loads(gzip.decompress((pooled.parent / "b.jsonl.gz").read_bytes()).splitlines()[0])["source"]["store"]
    by_store = json.loads(compare_command(pooled, "host:alpha", f"machine:{store}", "json"))
    assert [p["ratio"] for p in by_store["pairs"]] == [p["ratio"] for p in
                                                       json.loads(compare_command(pooled, "host:alpha", "host:beta",
                                                                                  "json"))["pairs"]]


def test_an_unknown_machine_lists_the_known_ones(pooled: Path) -> None:
    with pytest.raises(ConfigError, match="'host:gamma' matches no result.*host: alpha, beta"):
        compare_command(pooled, "host:alpha", "host:gamma", "json")
    with pytest.raises(ConfigError, match="machines: .*AMD EPYC"):
        compare_command(pooled, "machine:x", "host:alpha", "json")
