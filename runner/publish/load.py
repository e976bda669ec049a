"""What a site shows, read from the stores: one lean row per repeat, and the machine each came from.

A history plots one number per repeat, so the site reads that number with SQLite's json_extract instead of
decoding every row (100,000 repeats in a few seconds on two cores); the cross-machine verdicts go through
the analysis frame and `compare`, fed only the rows a comparison takes (each repeat's newest)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
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
    ids: list[str]                  # each store's id, in the order named (the frames' `store` column)
    runs: pd.DataFrame
    bisects: list[dict[str, Any]] = field(default_factory=list)  # each store's bisect answers, with "origin"


def history_metric(name: str) -> an.Metric:
    metric = an.get_metric(name)
    if metric.name not in HISTORY_METRICS:
        raise ConfigError(f"--metric {name}: a history plots one of {', '.join(HISTORY_METRICS)}")
    return metric


def load(dbs: Iterable[Path], metric: an.Metric) -> Loaded:
    frames, latest, runs, stores, ids, bisects = [], [], [], {}, [], []
    for n, db in enumerate(dbs):
        with Store(db, readonly=True) as store, store._guard():
            sid = store_exchange.store_id(store) or f"store{n}"
            stores[str(db)] = sid
            ids.append(sid)
            frames.append(_lean(store, metric.name, sid, n))
            rows = list(store.rows(latest_only=True))
            latest.append(an.frame(rows).assign(store=n))
            found = [dict(r) for r in store.db.execute("SELECT run_id, matrix_name, host, status FROM runs")]
            for r in found:
                r["origin"] = r["run_id"].rpartition("@")[2] if "@" in r["run_id"] else sid
                r["run_id"] = store_exchange.strip(r["run_id"], r["origin"])
            runs.append(pd.DataFrame(found, columns=["run_id", "matrix_name", "host", "status", "origin"]))
            bisects += [dict(b, origin=sid) for b in store.bisects()]
    repeats = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Loaded(repeats, pd.concat(latest, ignore_index=True), stores, ids,
                  pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(), bisects)


def _lean(store: Store, metric: str, sid: str, n: int) -> pd.DataFrame:
    # SQLite's JSON functions refuse the NaN and Infinity that Python's json writes (a diverged loss): such a row's
    # fields are read in Python instead, so that one of them never stops the site.
    env = ", ".join(f"CASE WHEN json_valid(env) THEN json_extract(env, '$.{f}') END" for f in _ENV)
    sql = (f"SELECT id, run_id, cell_key, repeat, environment, backend, status, started_at, params, "
           f"CASE WHEN json_valid(metrics) THEN json_extract(metrics, '$.{metric}') END, "
           f"CASE WHEN json_valid(metrics) THEN json_extract(metrics, '$.definitions.{metric}.unit') END, {env}, "
           "json_valid(metrics) AND json_valid(env) FROM results ORDER BY id")
    cols = ["id", "run_id", "cell_key", "repeat", "environment", "backend", "status", "started_at", "params",
            "value", "unit", *(f"env_{f}" for f in _ENV), "_valid"]
    rows = store.db.execute(sql).fetchall()
    rows = [r if r[-1] else _in_python(store, r, metric) for r in rows]
    df = pd.DataFrame.from_records(rows, columns=cols).drop(columns=["_valid"])
    # Every stored row, superseded ones included: a history shows what each run measured when it ran (a later
    # run that measured the repeat again supersedes it for `compare`, not for the history).
    codes, texts = pd.factorize(df["params"], use_na_sentinel=False)
    parsed = [_params(t) for t in texts]
    for f in _PARAMS:
        df[f] = pd.Series([p.get(f, "") for p in parsed], dtype=object).to_numpy()[codes]
    df["options"] = pd.Series([an.options_label(p) for p in parsed], dtype=object).to_numpy()[codes]
    # A repeat that states no unit is in its benchmark's own (a transformer's tok/s, an image model's img/s).
    default = {m: an.definition({}, metric, m)[1] for m in dict.fromkeys(str(m) for m in df["model"])}
    df["unit"] = [u.strip() if isinstance(u, str) and u.strip() else default[str(m)]
                  for u, m in zip(df["unit"], df["model"], strict=True)]
    df["value"] = pd.to_numeric(df["value"], errors="coerce")
    run_codes, run_ids = pd.factorize(df["run_id"], use_na_sentinel=False)
    df["origin"] = pd.Series([r.rpartition("@")[2] if "@" in r else sid for r in run_ids], dtype=object
                             ).to_numpy()[run_codes]
    env_cols = [f"env_{f}" for f in _ENV]
    groups = df.groupby(env_cols, dropna=False, sort=False)
    env_codes = groups.ngroup().to_numpy()
    first = groups.head(1).sort_index()
    words = {int(code): store_exchange.hardware({f: v for f, v in zip(_ENV, row, strict=True) if v is not None and v == v})
             for code, row in zip(env_codes[first.index], first[env_cols].itertuples(index=False), strict=True)}
    df["hardware"] = [words[int(c)] for c in env_codes]
    df["store"] = n
    return df.drop(columns=["params"])


def _in_python(store: Store, row: Any, metric: str) -> tuple[Any, ...]:
    found = store.db.execute("SELECT metrics, env FROM results WHERE id=?", (row[0],)).fetchone()
    metrics, env = (_params(found[0]), _params(found[1])) if found else ({}, {})
    value = metrics.get(metric)
    definitions = metrics.get("definitions")
    unit = definitions.get(metric, {}).get("unit") if isinstance(definitions, dict) and isinstance(
        definitions.get(metric), dict) else None
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    return (*row[:9], number, unit, *(env.get(f) if not isinstance(env.get(f), dict | list) else None for f in _ENV),
            1)


def _params(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return {k: "" if v is None else v for k, v in value.items()} if isinstance(value, dict) else {}
