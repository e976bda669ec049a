"""Fixtures for the report tests: the checked-in results loaded into a fresh store."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runner.domain.cells import stable_hash
from runner.store import SCHEMA, Store

FIXTURES = Path(__file__).parent / "fixtures"
RESULTS = FIXTURES / "results.json"


def load_results(path: Path = RESULTS) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def fill_store(db: Path, data: dict[str, Any]) -> Path:
    """Insert fixture runs and rows into a new store with plain SQL, as the runner would have stored them."""
    with Store(db) as store, store.db:
        for run in data["runs"]:
            store.db.execute(
                "INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, argv, host,"
                " status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run["run_id"], SCHEMA, run["started_at"], run["finished_at"], run["matrix_path"],
                 run["matrix_name"], json.dumps(run["argv"]), run["host"], run["status"]))
        for row in data["results"]:
            env = data["environments"][row["environment"]]
            capture = dict(env["env"])
            if row["status"] == "failed":  # no bench JSON: only what the backend knew
                capture = {k: v for k, v in capture.items() if k in ("image", "image_id", "repo_digest")}
            key = stable_hash({"environment": row["environment"], "params": row["params"]})
            store.db.execute(
                "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
                " status, reason, metrics, env, raw, log_tail, started_at, finished_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (SCHEMA, row["run_id"], key, row["repeat"], row["environment"], env["backend"],
                 json.dumps(env["tags"]), json.dumps(row["params"]), row["status"], row["reason"],
                 json.dumps(row["metrics"]), json.dumps(capture),
                 json.dumps({"precision": row["precision_record"]}) if row.get("precision_record") else None,
                 row["log_tail"],
                 row["started_at"], row["finished_at"]))
    return db


@pytest.fixture
def results_data() -> dict[str, Any]:
    return copy.deepcopy(load_results())


@pytest.fixture
def make_db(tmp_path: Path) -> Callable[[dict[str, Any]], Path]:
    """Build a store from (possibly modified) fixture data."""
    def make(data: dict[str, Any], name: str = "results.db") -> Path:
        return fill_store(tmp_path / name, data)
    return make


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return fill_store(tmp_path / "results.db", load_results())
