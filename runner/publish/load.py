"""What a site shows, read from the stores: one lean row per repeat, and the machine each came from.

A history plots one number per repeat, so the site reads that number with SQLite's json_extract instead of
decoding every row (100,000 repeats in a few seconds on two cores); the cross-machine verdicts go through
the analysis frame and `compare`, fed only the rows a comparison takes (each repeat's newest)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

import runner.analysis as an
from runner.errors import ConfigError
from runner.store import Store
from runner.store import exchange as store_exchange

# Metrics a history can plot: a number each repeat stores under metrics.<name> (the others are computed from
# several fields and are the report's business).
HISTORY_METRICS = ("throughput", "window_s", "loss_end", "accuracy", "images_per_joule")
_ENV = ("hostname", "cpu", "cpu_count", "device", "device_name", "torch", "python", "image")
_PARAMS = ("model", "precision", "batch_size", "dataset", "gpus", "nodes")


@dataclass(frozen=True)
class Loaded:
    """Every store's repeats (lean), their newest rows as the analysis frame, and each store's id."""

    repeats: pd.DataFrame
    latest: pd.DataFrame
    stores: dict[str, str]          # store path -> store id
    runs: pd.DataFrame


def history_metric(name: str) -> an.Metric:
    metric = an.get_metric(name)
    if metric.name not in HISTORY_METRICS:
        raise ConfigError(f"--metric {name}: a history plots one of {', '.join(HISTORY_METRICS)}")
    return metric


def load(dbs: Iterable[Path], metric: an.Metric) -> Loaded:
    frames, latest, runs, stores = [], [], [], {}
    for n, db in enumerate(dbs):
        with Store(db, readonly=True) as store, store._guard():
            sid = store_exchange.store_id(store) or f"store{n}"
            stores[str(db)] = sid
            frames.append(_lean(store, metric.name, sid, n))
            rows = list(store.rows(latest_only=True))
            latest.append(an.frame(rows).assign(store=n))
            runs.append(pd.DataFrame([dict(r) for r in store.db.execute(
                "SELECT run_id, started_at, finished_at, matrix_name, host, status FROM runs")]).assign(store=n))
    repeats = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Loaded(repeats, pd.concat(latest, ignore_index=True), stores,
                  pd.concat(runs, ignore_index=True) if runs else pd.DataFrame())


def _lean(store: Store, metric: str, sid: str, n: int) -> pd.DataFrame:
    env = ", ".join(f"json_extract(env, '$.{f}')" for f in _ENV)
    sql = (f"SELECT id, run_id, cell_key, repeat, environment, backend, status, started_at, params, "
           f"json_extract(metrics, '$.{metric}'), json_extract(metrics, '$.definitions.{metric}.unit'), {env} "
           "FROM results ORDER BY id")
    cols = ["id", "run_id", "cell_key", "repeat", "environment", "backend", "status", "started_at", "params",
            "value", "unit", *(f"env_{f}" for f in _ENV)]
    df = pd.DataFrame.from_records(store.db.execute(sql).fetchall(), columns=cols)
    # Every stored row, superseded ones included: a history shows what each run measured when it ran (a later
    # run that measured the repeat again supersedes it for `compare`, not for the history).
    parsed = [_params(p) for p in df["params"]]
    for f in _PARAMS:
        df[f] = [p.get(f, "") for p in parsed]
    df["options"] = [an.options_label(p) for p in parsed]
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    df["origin"] = [r.rpartition("@")[2] if "@" in r else sid for r in df["run_id"]]
    df["hardware"] = [store_exchange.hardware({f: v for f, v in zip(_ENV, row, strict=True) if v is not None})
                      for row in df[[f"env_{f}" for f in _ENV]].itertuples(index=False)]
    df["store"] = n
    return df.drop(columns=["params"])


def _params(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return {k: "" if v is None else v for k, v in value.items()} if isinstance(value, dict) else {}
