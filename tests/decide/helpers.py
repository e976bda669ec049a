"""Fake store rows for the decision tests: the long frame built the way the store's rows are."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from runner.analysis import frame


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
    return frame([r for g in groups for r in g])
