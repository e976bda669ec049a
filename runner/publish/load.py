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
from runner.base.errors import ConfigError
from runner.store import LeanRow, Store
from runner.store import exchange as store_exchange

# What a repeat ran on, and what tells two definitions of one cell apart (runner/analysis/identity.py).
_ENV = ("hostname", "cpu", "cpu_count", "device", "device_name", "torch", "python", "image", "image_id", "repo_digest",
        "cuda", "cudnn", "driver")
OK, DIVERGED = "ok", "diverged"
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
    imports: list[dict[str, Any]] = field(default_factory=list)  # what each store imported (store_exchange.imports)


def history_metric(name: str) -> an.Metric:
    """The metric a site's histories plot: one the metric table places on the site (runner/record/metrics.py)."""
    metric = an.get_metric(name)
    plotted = an.METRICS.shown("site")
    if metric not in plotted:
        raise ConfigError(f"--metric {name}: a history plots one of {', '.join(m.name for m in plotted)}")
    return metric


def load(dbs: Iterable[Path], metric: an.Metric) -> Loaded:
    frames, latest, runs, stores, ids, bisects, imports = [], [], [], {}, [], [], []
    dbs = list(dbs)
    for n, db in enumerate(dbs):
        with Store(db, readonly=True) as store:
            sid = store_exchange.store_id(store) or f"store{n}"
            stores[str(db)] = sid
            ids.append(sid)
            frames.append(_lean(store, metric, sid, n))
            rows = list(store.rows(latest_only=True))
            latest.append(an.frame(rows).assign(store=n))
            found = []
            for info in store.runs():
                origin = info.run_id.rpartition("@")[2] if "@" in info.run_id else sid
                found.append({"run_id": store_exchange.strip(info.run_id, origin), "matrix_name": info.matrix_name,
                              "host": info.host, "status": info.status, "origin": origin})
            runs.append(pd.DataFrame(found, columns=["run_id", "matrix_name", "host", "status", "origin"]))
            bisects += [dict(b, origin=sid) for b in store.bisects()]
            imports += [dict(i, store=n) for i in store_exchange.imports(store)]
    _one_machine_an_id(frames, ids, dbs)
    repeats = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return Loaded(repeats, pd.concat(latest, ignore_index=True), stores, ids,
                  pd.concat(runs, ignore_index=True) if runs else pd.DataFrame(), bisects, imports)


def _one_machine_an_id(frames: list[pd.DataFrame], ids: list[str], dbs: list[Path]) -> None:
    """Two stores named that share an id are one machine only when one is a copy of the other as it was (their own
    rows agree wherever both have them); two copies that both measured after the copy are two machines under one id,
    and the site would pool them: refused in one line, as `matrix import` refuses their files."""
    seen: dict[str, tuple[int, dict[int, tuple[Any, ...]]]] = {}
    for n, (sid, df) in enumerate(zip(ids, frames, strict=True)):
        own = df[~df["run_id"].str.contains("@", regex=False)]
        rows = dict(zip(own["id"].tolist(), zip(own["run_id"].tolist(), own["cell_key"].tolist(),
                                                own["repeat"].tolist(), own["started_at"].tolist(), strict=True),
                        strict=True))
        if sid in seen:
            m, other = seen[sid]
            if any(other[i] != r for i, r in rows.items() if i in other):
                raise ConfigError(f"--db {dbs[m]} and --db {dbs[n]} share the store id {sid} but hold different "
                                  "repeats under it (one was copied from the other, and both measured since): two "
                                  "machines under one id; publish one of them")
            rows = {**other, **rows}
        seen[sid] = (n, rows)


def _lean(store: Store, metric: an.Metric, sid: str, n: int) -> pd.DataFrame:
    """Every stored row, superseded ones included (a history shows what each run measured when it ran; a later run
    that measured the repeat again supersedes it for `compare`, not for the history), with its status as admission
    sees it (runner/record/admission.py, the frame's own step: a diverged or refused repeat is never plotted or
    tested as ok), the figure plotted, the definition it belongs to and where it ran."""
    cols = ["id", "run_id", "cell_key", "repeat", "environment", "backend", "status", "started_at", "params",
            "value", "unit", *(f"env_{f}" for f in _ENV), "stored_status"]
    rows = [_admitted(r, metric) for r in store.lean_rows(_ENV)]
    df = pd.DataFrame.from_records(rows, columns=cols)
    codes, texts = pd.factorize(df["params"], use_na_sentinel=False)
    parsed = [_params(t) for t in texts]
    for f in _PARAMS:
        df[f] = pd.Series([p.get(f, "") for p in parsed], dtype=object).to_numpy()[codes]
    df["options"] = pd.Series([an.options_label(p) for p in parsed], dtype=object).to_numpy()[codes]
    # A repeat that states no unit is in its benchmark's own (a transformer's tok/s, an image model's img/s).
    df["unit"] = df["unit"].fillna("")
    pairs = df[["unit", "model"]].drop_duplicates()
    default = {m: an.definition({}, metric.name, m)[1] for m in dict.fromkeys(str(m) for m in pairs["model"].tolist())}
    said = {(u, m): u.strip() if isinstance(u, str) and u.strip() else default[str(m)]
            for u, m in zip(pairs["unit"].tolist(), pairs["model"].tolist(), strict=True)}
    codes_u, uniques = pd.MultiIndex.from_frame(df[["unit", "model"]]).factorize()
    df["unit"] = pd.Series([said[(u, m)] for u, m in uniques], dtype=object).to_numpy()[codes_u]
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
    df["settings"] = df["cell_key"].map(_settings(store))
    for c in env_cols:
        df[c] = df[c].where(df[c].notna(), "").astype(str)
    df["store"] = n
    return df.drop(columns=["params"])


def _settings(store: Store) -> dict[str, str]:
    """Each cell key's run settings in words (the frame's `settings`: part of a definition, the same for its every
    repeat), read from one row of each."""
    return {k: an.settings_text(raw) for k, raw in store.first_raw_by_cell().items()}


_RAW_PARAMS: dict[str, dict[str, Any]] = {}


def _admitted(row: LeanRow, metric: an.Metric) -> tuple[Any, ...]:
    """One row with its figure, the figure's unit, and its status as admission decides it from the stored row."""
    metrics = _object(row.metrics)
    raw_text = row.raw_params
    params = _RAW_PARAMS.get(raw_text) if raw_text is not None else None
    if params is None:
        params = _params(raw_text)
        if raw_text is not None and len(_RAW_PARAMS) < 4096:
            _RAW_PARAMS[raw_text] = params
    raw = {"params": params, **({"workload": {"parser": True}} if row.program else {})}
    status = row.status
    if status in (OK, DIVERGED):
        status = an.admission_of(status, metrics, raw).status
    value = metric.read(metrics, raw)  # the table's reader (runner/record/metrics.py); NaN: not measured
    definitions = metrics.get("definitions")
    unit = definitions.get(metric.name, {}).get("unit") if isinstance(definitions, dict) and isinstance(
        definitions.get(metric.name), dict) else None
    number = value if value == value else None
    return (row.id, row.run_id, row.cell_key, row.repeat, row.environment, row.backend, status, row.started_at,
            row.params, number, unit, *row.env, row.status)


def _object(text: Any) -> dict[str, Any]:
    """A stored JSON object as Python reads it (NaN included), {} for anything else."""
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _params(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text) if text else {}
    except (TypeError, ValueError):
        return {}
    return {k: "" if v is None else v for k, v in value.items()} if isinstance(value, dict) else {}
