"""The store's reads for whole stores: `rows()` decodes a document many rows store alike once and shares it (the
record's documents are read-only), while `decoded()`, what an export changes, gives each row its own; `lean_rows()`
is the published site's read, named fields rather than positions, with a row SQLite's JSON functions refuse (a NaN
Python's json wrote) read in Python to the same fields."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from runner.store import LeanRow, Store
from tests.analysis.helpers import rows_for, store_of


@pytest.fixture
def db(tmp_path: Path) -> Path:
    rows = rows_for("k1", [100.0, 101.0, 99.0], run_id="r1") + rows_for("k2", [50.0, 51.0], run_id="r1", batch_size=64)
    for r in rows:
        r["env"] = {"hostname": "box", "device": "cpu", "cpu": "EPYC", "cpu_count": 2}
    rows[-1]["env"] = {"hostname": "box", "device": "cpu", "cpu": "EPYC", "load": math.nan}  # json writes NaN
    return store_of(tmp_path / "results.db", rows)


def test_rows_share_what_many_rows_store_alike(db: Path) -> None:
    with Store(db, readonly=True) as store:
        rows = list(store.rows(latest_only=False))
        own = list(store.decoded(latest_only=False))
    k1 = [r for r in rows if r.cell_key == "k1"]
    assert k1[0].params is k1[1].params is k1[2].params and k1[0].env is rows[-2].env
    assert k1[0].metrics is not k1[1].metrics  # each repeat's own figures
    assert rows[0].params != rows[-1].params  # another cell's params are another document
    with pytest.raises(TypeError):
        k1[0].params["model"] = "changed"  # type: ignore[index]  # shared, so never changed
    own[0]["params"]["model"] = "changed"  # an export's rows are its own to change
    assert own[1]["params"]["model"] == "mnist_cnn" and k1[1].params["model"] == "mnist_cnn"


def test_lean_rows_are_named_and_read_a_nan_row_in_python(db: Path) -> None:
    with Store(db, readonly=True) as store:
        lean = list(store.lean_rows(["hostname", "cpu", "cpu_count"]))
        with pytest.raises(ValueError, match="env fields"):
            list(store.lean_rows(["cpu') FROM results; --"]))
    assert all(isinstance(r, LeanRow) for r in lean) and [r.cell_key for r in lean] == ["k1"] * 3 + ["k2"] * 2
    assert lean[0].env == ("box", "EPYC", 2) and lean[-1].env == ("box", "EPYC", None)  # the NaN row, read in Python
    assert json.loads(lean[0].raw_params or "{}") == {"iterations": 20, "warmup": 5, "seed": 0}
    assert json.loads(lean[-1].raw_params or "{}") == {"iterations": 20, "warmup": 5, "seed": 0}
    assert not lean[0].program and json.loads(lean[0].params or "{}")["model"] == "mnist_cnn"
