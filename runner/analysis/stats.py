"""Per-cell statistics: n, mean, std, CV, min, max, median and the 95% interval of the mean per metric (on the log
scale for a figure above 0 by nature: runner/analysis/significance.py `mean_interval`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from runner.analysis import resolution
from runner.analysis.frame import (
    BASELINE_PRECISION,
    CELL_KEYS,
    ENV_FIELDS,
    STAT_NAMES,
    environment_rank,
    precision_rank,
    present,
)
from runner.analysis.resolution import NEGLIGIBLE
from runner.analysis.significance import CONFIDENCE, mean_interval
from runner.domain.outcomes import Status
from runner.record.metrics import METRICS

NOISY_CV = 0.10    # throughput that varies more than this between repeats is flagged
THROTTLED = "throttled"  # per cell: how many of its ok repeats the GPU's telemetry marked throttled
DATA_BOUND = 0.10  # a loader that keeps the device waiting more than this share of the window is flagged


@dataclass(frozen=True)
class Stats:
    """Descriptive statistics of one sample; std, CV and CI are NaN below two values."""

    n: int
    mean: float
    std: float
    cv: float
    min: float
    max: float
    median: float
    ci_low: float
    ci_high: float


def positive(metric: str) -> bool:
    """Whether a metric is above 0 by nature (a throughput, a time, a memory, an energy, a share: its admission
    bound starts at 0), so that its interval is made on the log scale and never reaches below 0."""
    m = METRICS.get(metric)
    return m is not None and m.reach is not None and m.reach.low >= 0


is_positive = positive  # `describe` names its argument so


def widened(low: Any, high: Any, mean: Any, rounding: Any, metric: str | None, scale: float = 1.0
            ) -> tuple[np.ndarray, np.ndarray]:
    """An interval of a mean widened by what the printed resolution alone may move the mean (`rounding`, half a
    quantum; 0 where it does not matter) and kept inside what the metric can be: for a figure above 0 by nature the
    lower end moves by the ratio (mean - rounding) / mean, so it never goes below 0 (it reaches 0 only where the
    figure is printed more coarsely than its mean); a share's upper end stays at most 1 (an accuracy of 1.8 is no
    accuracy). `scale`: the figures are in the metric's displayed unit (stored x scale), its bounds too."""
    lo, hi, m, r = (np.asarray(x, dtype=float) for x in (low, high, mean, rounding))
    m_info = METRICS.get(metric) if metric else None
    if metric and positive(metric):
        with np.errstate(invalid="ignore", divide="ignore"):
            lo = np.where(r > 0, lo * np.clip((m - r) / np.where(m > 0, m, 1.0), 0.0, 1.0), lo)
    else:
        lo = lo - r
    hi = hi + r
    reach = m_info.reach if m_info is not None else None
    if reach is not None:
        # A share's admission allows a rounding's hair past 1 (1 + 1e-9); no interval of a mean reaches past 1.
        top = 1.0 if 1.0 < reach.high <= 1.0 + 1e-6 else reach.high
        lo, hi = np.maximum(lo, reach.low * scale), np.minimum(hi, top * scale)
    return lo, hi


def describe(values: Sequence[float] | np.ndarray, positive: bool | None = None,
             confidence: float = CONFIDENCE, metric: str | None = None) -> Stats:
    """Statistics of one sample (NaNs ignored): std with ddof=1, the 95% interval of the mean
    (runner/analysis/significance.py `mean_interval`): on the log scale where the figure is `positive` (None: the
    metric's nature where `metric` is given, else where every value is above 0), so it never reaches 0; else the t
    interval; kept inside what the `metric` can be (a share at most 1)."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        nan = math.nan
        return Stats(0, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n >= 2 else math.nan
    pos = (is_positive(metric) if metric else bool((x > 0).all())) if positive is None else positive
    low, high = mean_interval(mean, std, n, pos, confidence)
    if metric:
        low, high = widened(low, high, mean, 0.0, metric)
    cv = std / mean if mean != 0 else math.nan
    return Stats(n, mean, std, cv, float(x.min()), float(x.max()), float(np.median(x)), float(low), float(high))


def status_summary(counts: Mapping[str, int]) -> str:
    """'3 ok' or '2 ok, 1 oom': every status is counted in words."""
    order = [s.value for s in Status]
    parts = sorted(((k, v) for k, v in counts.items() if v), key=lambda kv: (order.index(kv[0])
                   if kv[0] in order else len(order), kv[0]))
    return ", ".join(f"{v} {k}" for k, v in parts)


def _join_unique(values: Iterable[Any]) -> str:
    seen: list[str] = []
    for v in values:
        s = str(v)
        if s and s not in seen:
            seen.append(s)
    return ", ".join(seen)


def cell_attributes(df: pd.DataFrame, keys: Sequence[str], joined: Sequence[str] = ()
                    ) -> tuple[pd.DataFrame, np.ndarray]:
    """Per group of `keys`, in one pass over the rows: the keys, n, first id, status counts in words, the
    last non-ok reason and log tail, and each `joined` column's distinct values joined with ', '.

    A plain Python pass: per-group pandas lambdas cost ~100x more on a 10,000-repeat store.
    Returns the frame, indexed by group number (pandas' ngroup order), and each row's group number.
    """
    keys = list(keys)
    gid = df.groupby(keys, sort=False, dropna=False).ngroup().to_numpy()
    ngroups = int(gid.max()) + 1 if len(gid) else 0
    first_pos = [-1] * ngroups
    n = [0] * ngroups
    first_id = [0] * ngroups
    counts: list[dict[str, int]] = [{} for _ in range(ngroups)]
    reason = [""] * ngroups
    log_tail = [""] * ngroups
    tag_sets: list[set[str]] = [set() for _ in range(ngroups)]
    order = np.argsort(df["id"].to_numpy(), kind="stable")  # so "last" means newest
    ids, statuses = df["id"].to_numpy(), df["status"].tolist()
    reasons, tails, tags = df["reason"].tolist(), df["log_tail"].tolist(), df["tags"].tolist()
    for pos in order:
        g = gid[pos]
        if first_pos[g] < 0:
            first_pos[g] = int(pos)
            first_id[g] = int(ids[pos])
        n[g] += 1
        st = statuses[pos]
        counts[g][st] = counts[g].get(st, 0) + 1
        if st != Status.OK.value:
            reason[g], log_tail[g] = reasons[pos], tails[pos]
        if "tags" in joined:
            tag_sets[g].update(tags[pos])
    out = df.iloc[first_pos][keys].reset_index(drop=True) if ngroups else pd.DataFrame(columns=keys)
    n_ok = [c.get(Status.OK.value, 0) for c in counts]
    out["n"] = n
    out["n_ok"] = n_ok
    out["_first"] = first_id
    out["statuses"] = [status_summary(c) for c in counts]
    out["status"] = [_overall_status(c, k, t) for c, k, t in zip(counts, n_ok, n, strict=True)]
    out["reason"] = reason
    out["log_tail"] = log_tail
    for c in joined:
        out[c] = [", ".join(sorted(t)) for t in tag_sets] if c == "tags" else \
            _distinct_joined(df[c].to_numpy(dtype=object)[order], gid[order], ngroups)
    return out, gid


def _distinct_joined(values: np.ndarray, groups: np.ndarray, ngroups: int) -> list[str]:
    """Per group, its distinct values (as text, neither "" nor None) in the order the rows first hold them, joined
    with ', '. Each distinct value is written once and each (group, value) pair visited once: a 10,000-repeat
    store's columns hold a few values per cell, and a visit of every row of every column cost seconds."""
    seen: list[dict[str, None]] = [{} for _ in range(ngroups)]
    try:
        codes, uniques = pd.factorize(values, use_na_sentinel=False)
    except TypeError:  # an unhashable value (a list): every row visited
        for v, g in zip(values.tolist(), groups.tolist(), strict=True):
            if v is not None and not (isinstance(v, str) and v == ""):
                seen[g][str(v)] = None
        return [", ".join(d) for d in seen]
    words = [None if (u is None or (isinstance(u, str) and u == "")) else str(u) for u in uniques]
    _, first = np.unique(groups.astype(np.int64) * max(len(uniques), 1) + codes, return_index=True)
    for i in np.sort(first).tolist():
        word = words[codes[i]]
        if word is not None:
            seen[groups[i]][word] = None
    return [", ".join(d) for d in seen]


def _overall_status(counts: Mapping[str, int], n_ok: int, n: int) -> str:
    """ok when every repeat is; 'partial' when some are; else the most frequent other status."""
    if n_ok == n:
        return Status.OK.value
    if n_ok:
        return "partial"
    return max(sorted(counts), key=lambda k: counts[k])


def metric_stats(df: pd.DataFrame, gid: np.ndarray, ngroups: int, metrics: Sequence[str]) -> pd.DataFrame:
    """`<metric>_<stat>` per group over the ok repeats, vectorised: n, mean, std (ddof=1), CV, min, max,
    median and the interval of the mean (`mean_interval`); std/CV/CI are NaN below two values."""
    ok = (df["status"] == Status.OK.value).to_numpy()
    metrics = list(metrics)
    index = pd.RangeIndex(ngroups)
    if ok.any():
        agg = df.loc[ok, metrics].groupby(gid[ok]).agg(["count", "mean", "std", "min", "max", "median"])
        agg.columns = [f"{m}_{'n' if s == 'count' else s}" for m, s in agg.columns]
        agg = agg.reindex(index)
    else:
        agg = pd.DataFrame(index=index)
    cols: dict[str, Any] = {}

    def get(col: str) -> np.ndarray:
        return agg[col].to_numpy(dtype=float) if col in agg else np.full(ngroups, math.nan)

    for m in metrics:
        n = np.nan_to_num(get(f"{m}_n"), nan=0).astype(int)
        mean = get(f"{m}_mean")
        std = np.where(n >= 2, get(f"{m}_std"), math.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            cv = np.where(mean != 0, std / mean, math.nan)
        low, high = mean_interval(mean, std, n, positive(m))
        inferred, recorded = _quanta(df, ok, gid, ngroups, m)
        res = np.maximum(inferred, recorded)
        rounding = np.where(res > NEGLIGIBLE * np.abs(np.nan_to_num(mean)), res / 2, 0.0)
        low, high = widened(low, high, mean, rounding, m)
        cols.update({f"{m}_n": n, f"{m}_mean": mean, f"{m}_std": std, f"{m}_cv": cv,
                     f"{m}_min": get(f"{m}_min"), f"{m}_max": get(f"{m}_max"),
                     f"{m}_median": get(f"{m}_median"), f"{m}_ci_low": low,
                     f"{m}_ci_high": high, f"{m}_res": res, f"{m}_resi": inferred,
                     f"{m}_resr": recorded})
    return pd.DataFrame(cols, index=index)


def _quanta(df: pd.DataFrame, ok: np.ndarray, gid: np.ndarray, ngroups: int, metric: str
            ) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the printed resolution of the ok repeats' figures of `metric`, inferred and recorded
    (runner/analysis/resolution.py); a frame without the admission columns (built by hand) has none."""
    if "resolution" not in df or "printed" not in df or not ok.any():
        return np.zeros(ngroups), np.zeros(ngroups)
    values = np.where(ok, df[metric].to_numpy(dtype=float), math.nan)
    return resolution.per_group(values, df["resolution"].tolist(), df["printed"].to_numpy(dtype=bool), gid,
                                ngroups, metric)


def throttled_counts(df: pd.DataFrame, gid: np.ndarray, ngroups: int) -> np.ndarray:
    """Per group, the ok repeats that bench's telemetry marked throttled."""
    if THROTTLED not in df or not ngroups:
        return np.zeros(ngroups, dtype=int)
    hit = ((df["status"] == Status.OK.value) & df[THROTTLED].astype(bool)).to_numpy()
    return np.bincount(gid[hit], minlength=ngroups).astype(int) if len(gid) else np.zeros(ngroups, dtype=int)
def _unsteady(df: pd.DataFrame, gid: np.ndarray, ngroups: int) -> pd.DataFrame:
    """n_unsteady per group: ok repeats whose warm-up reached a ceiling before the iteration times were steady."""
    if "steady" not in df:
        return pd.DataFrame({"n_unsteady": np.zeros(ngroups, dtype=int)})
    bad = ((df["status"] == Status.OK.value) & df["steady"].map(lambda v: v is False).astype(bool)).to_numpy()
    counts = np.bincount(gid[bad], minlength=ngroups) if ngroups else np.zeros(0, dtype=int)
    return pd.DataFrame({"n_unsteady": counts.astype(int)})


def summarize(df: pd.DataFrame, keys: Sequence[str] = CELL_KEYS,
              metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per cell: status counts, then `<metric>_<stat>` for every metric (default: the metric table's, as it is
    now) over the ok repeats.

    A cell is its definition: rows of different cell keys are never pooled, even under one name (pass
    runner.analysis.identity.choose's frame to show one definition per name)."""
    keys = list(keys)
    metrics = tuple(METRICS) if metrics is None else tuple(metrics)
    if "cell_key" in df and "cell_key" not in keys:
        keys.append("cell_key")
    stat_cols = [f"{m}_{s}" for m in metrics for s in STAT_NAMES]
    env_cols = [f"env_{f}" for f in ENV_FIELDS]
    settings = ["settings"] if "settings" in df else []
    settings += [f"unit_{m}" for m in metrics if f"unit_{m}" in df]  # each metric's units, joined
    base_cols = [*keys, "n", "n_ok", "status", "statuses", THROTTLED, "backend", "tags", "hardware", "run_ids",
                 *settings, "reason", "log_tail", *env_cols, "n_unsteady"]
    if df.empty:
        return pd.DataFrame(columns=base_cols + stat_cols)
    attrs, gid = cell_attributes(df.rename(columns={"run_id": "run_ids"}), keys,
                                 ["backend", "tags", "hardware", "run_ids", *settings, *env_cols])
    out = pd.concat([attrs, metric_stats(df, gid, len(attrs), metrics), _unsteady(df, gid, len(attrs))], axis=1)
    out[THROTTLED] = throttled_counts(df, gid, len(attrs))
    sort = out.assign(
        _env=out["environment"].map(environment_rank(df)) if "environment" in out else 0,
        _prec=precision_rank(out["precision"]) if "precision" in out else 0,
    )
    sort_cols = [c for c in ("_env", "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size")
                 if c in sort]
    sort = sort.sort_values([*sort_cols, "_first"], kind="stable")
    return sort[base_cols + stat_cols].reset_index(drop=True)


def precision_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and precision: time, throughput, memory, accuracy and the ratio to fp32."""
    keys = ["environment", "model", "batch_size", "dataset", "gpus", "nodes", "options"]
    cols = [*keys, "precision", "n", "n_ok", "statuses"]
    shown = METRICS.shown("precision")  # the metric table's (runner/record/metrics.py), in its order
    ratio_metrics = [m.name for m in shown if m.vs_fp32]
    for m in shown:
        cols += [f"{m.name}_n", f"{m.name}_mean", f"{m.name}_std"]
        if m.vs_fp32:
            cols.append(f"{m.name}_vs_fp32")
    if summary.empty or summary["precision"].nunique() < 2 or BASELINE_PRECISION not in set(summary["precision"]):
        return pd.DataFrame(columns=cols)
    base = summary[summary["precision"] == BASELINE_PRECISION].set_index(keys)
    out = summary.copy()
    idx = pd.MultiIndex.from_frame(out[keys])
    for name in ratio_metrics:
        ref = base[f"{name}_mean"].reindex(idx).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{name}_vs_fp32"] = out[f"{name}_mean"].to_numpy() / ref
    out = out[idx.isin(base.index)]
    # Configuration first, then precision: each fp32 row sits right above the rows compared with it.
    out = out.assign(_env=out["environment"].map(environment_rank(summary)),
                     _prec=precision_rank(out["precision"]))
    out = out.sort_values(["_env", "model", "dataset", "options", "gpus", "nodes", "batch_size", "_prec"],
                          kind="stable")
    return out[cols].reset_index(drop=True)


def quality_flags(summary: pd.DataFrame, noisy_cv: float = NOISY_CV, data_bound: float = DATA_BOUND
                  ) -> pd.DataFrame:
    """Cells whose numbers deserve suspicion: throughput CV above `noisy_cv` across repeats ("noisy"), the data
    loader waited on for more than `data_bound` of the timed window ("data-bound"), a repeat whose warm-up
    reached its ceiling before the iteration times were steady ("unsteady", value: the share of ok repeats), or
    ok repeats that the GPU's telemetry marked throttled ("throttled", the value the share of ok repeats)."""
    cols = [*CELL_KEYS, "flag", "value"]
    parts = []
    noisy = summary[summary["throughput_cv"] > noisy_cv]
    parts.append(noisy.assign(flag="noisy", value=noisy["throughput_cv"]))
    if "n_unsteady" in summary:
        unsteady = summary[summary["n_unsteady"] > 0]
        parts.append(unsteady.assign(flag="unsteady", value=unsteady["n_unsteady"] / unsteady["n_ok"].clip(lower=1)))
    bound = summary[summary["data_wait_mean"] > data_bound]
    parts.append(bound.assign(flag="data-bound", value=bound["data_wait_mean"]))
    if THROTTLED in summary:
        hot = summary[summary[THROTTLED] > 0]
        parts.append(hot.assign(flag="throttled", value=hot[THROTTLED] / hot["n_ok"].clip(lower=1)))
    out = pd.concat(parts)
    return out[cols].reset_index(drop=True) if not out.empty else pd.DataFrame(columns=cols)


MEASURE_SUMMARY_COLUMNS = (*CELL_KEYS, "cell_key", "n_ok", "warmup_min", "warmup_max", "n_steady", "n_unsteady",
                           "n_judged", "window_iters", "window_s_mean", "calibrated", "cpu_math", "cpu_native",
                           "cpu_why", "load_min", "load_max")


def measurement(df: pd.DataFrame) -> pd.DataFrame:
    """Per cell, how its ok repeats were measured: warm-up iterations (min, max), how many warm-ups were steady,
    reached a ceiling, or were a fixed count (n_judged counts the first two), the window's iterations (the
    distinct counts, joined) and mean seconds, whether a first repeat calibrated them, what the CPU did with the
    precision's math, and the 1-min load average over the repeats.

    One pass over the rows in Python, each cell's rows taken by position (a 10,000-repeat store has ~500 cells:
    a pandas sub-frame per cell cost 100x more); the minima, maxima and means are pandas' and numpy's own."""
    cols = list(MEASURE_SUMMARY_COLUMNS)
    if df.empty or "warmup_iters" not in df:
        return pd.DataFrame(columns=cols)
    read = [*CELL_KEYS, "cell_key", "seq", "id", "warmup_iters", "load", "window_s", "steady", "window_iters",
            "calibrated", "cpu_native", "cpu_math", "cpu_why"]  # the columns read: the wide frame is copied once
    ok = df.loc[df["status"] == Status.OK.value, present(df, read)]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    ok = ok.sort_values(["seq", "id"])
    gid = ok.groupby("cell_key", sort=False).ngroup().to_numpy()
    members = np.argsort(gid, kind="stable")  # each cell's rows in (seq, id) order, cell by cell
    bounds = np.flatnonzero(np.diff(gid[members])) + 1
    groups = np.split(members, bounds)
    firsts = ok.iloc[[int(g[0]) for g in groups]]
    warm = pd.to_numeric(ok["warmup_iters"], errors="coerce").groupby(gid, sort=True)
    load = pd.to_numeric(ok["load"], errors="coerce").groupby(gid, sort=True)
    windows_s = ok["window_s"].to_numpy(dtype=float)
    steady, windows = ok["steady"].tolist(), ok["window_iters"].tolist()
    calibrated, native = ok["calibrated"].tolist(), ok["cpu_native"].tolist()
    cpu_math, cpu_why = ok["cpu_math"].tolist(), ok["cpu_why"].tolist()
    rows = []
    for g, first in zip(groups, firsts[[*CELL_KEYS, "cell_key"]].itertuples(index=False), strict=True):
        st = [steady[i] for i in g]
        ws = windows_s[g]
        nat = [native[i] for i in g if isinstance(native[i], bool)]
        rows.append({**dict(zip((*CELL_KEYS, "cell_key"), first, strict=True)), "n_ok": len(g),
                     "n_steady": sum(v is True for v in st), "n_unsteady": sum(v is False for v in st),
                     "n_judged": sum(isinstance(v, bool) for v in st),
                     "window_iters": ", ".join(map(str, dict.fromkeys(
                         int(v) for v in (windows[i] for i in g) if isinstance(v, int | float) and v == v))),
                     "window_s_mean": float(np.nan if np.isnan(ws).all() else np.nanmean(ws)),
                     "calibrated": any(bool(calibrated[i]) for i in g),
                     "cpu_math": _join_unique(cpu_math[i] for i in g), "cpu_native": (all(nat) if nat else None),
                     "cpu_why": _join_unique(cpu_why[i] for i in g)})
    out = pd.DataFrame(rows)
    out["warmup_min"], out["warmup_max"] = warm.min().to_numpy(), warm.max().to_numpy()
    out["load_min"], out["load_max"] = load.min().to_numpy(), load.max().to_numpy()
    out = out.assign(_env=out["environment"].map(environment_rank(df)), _prec=precision_rank(out["precision"]))
    out = out.sort_values(["_env", "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size"],
                          kind="stable")
    return out[cols].reset_index(drop=True)
