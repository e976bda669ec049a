"""A pooled store of two machines (one with a 25% step in its history) for the site tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.commands.export import export_command
from runner.commands.import_ import import_command
from tests.store.synthetic import fill_history


@pytest.fixture(scope="session")
def pooled_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("pooled")
    a = fill_history(tmp / "a.db", "alpha", "AMD EPYC", runs=8, repeats=3, cells=3, seed=1, step_at=4, step=0.75)
    b = fill_history(tmp / "b.db", "beta", "Intel <Xeon> & \"co\"", runs=8, repeats=3, cells=3, seed=2,
                     first_run=1.7e9 + 3600, environment="<script>alert(1)</script>")
    export_command(a, tmp / "a.jsonl.gz", None, None)
    export_command(b, tmp / "b.jsonl.gz", None, None)
    import_command(tmp / "pooled.db", [tmp / "a.jsonl.gz", tmp / "b.jsonl.gz"])
    return tmp / "pooled.db"
