"""Fake store rows for the decision tests: the long frame built the way the store's rows are."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from runner.analysis import StoredRepeat, frame


def rows_for(key: str, values: Sequence[float], *, run_id: str = "r1", start: float = 1000.0,
             environment: str = "cpu", status: str = "ok", peak: float | None = None,
             **params: Any) -> list[dict[str, Any]]:
    p = {"model": "mnist_cnn", "precision": "fp32", "batch_size": 32, "dataset": "synthetic", **params}
    return [{"id": int(start * 10) + i, "run_id": run_id, "cell_key": key, "repeat": i, "environment": environment,
             "backend": "local", "tags": [], "params": p, "status": status,
             "metrics": {"throughput": v, "window_s": 1.0,
                         **({"peak_mem_allocated": peak * 2**20} if peak is not None else {})},
             "env": {}, "started_at": start + i, "finished_at": start + i + 1}
            for i, v in enumerate(values)]


def long_frame(*groups: list[dict[str, Any]]) -> pd.DataFrame:
    """The frame of these rows, each the typed repeat the store would read (StoredRepeat.of)."""
    return frame(StoredRepeat.many([r for g in groups for r in g]))


def store_of(db: Path, rows: Sequence[dict[str, Any]]) -> Path:
    """A real store holding `rows` (rows_for's shape) as `matrix run` would have stored them, with their runs."""
    import json

    from runner.store import SCHEMA, Store

    with Store(db) as store, store.db:
        store.db.execute("BEGIN")
        for run_id in dict.fromkeys(r["run_id"] for r in rows):
            t0 = min(r["started_at"] for r in rows if r["run_id"] == run_id)
            store.db.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, "
                             "argv, host, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (run_id, SCHEMA, t0, t0 + 60, "matrix.yaml", "test", "[]", "host", "complete"))
        store.db.executemany(
            "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params, status, "
            "reason, metrics, env, raw, log_tail, started_at, finished_at) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(SCHEMA, r["run_id"], r["cell_key"], r["repeat"], r["environment"], r["backend"], json.dumps(r["tags"]),
              json.dumps(r["params"]), r["status"], r.get("reason"), json.dumps(r["metrics"]), json.dumps(r["env"]),
              json.dumps(r.get("raw") or {"params": {"iterations": 20, "warmup": 5, "seed": 0}}), "",
              r["started_at"], r["finished_at"]) for r in rows])
    return db
