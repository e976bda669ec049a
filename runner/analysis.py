"""Statistics over the result store (DESIGN.md step 5): every number a report shows is computed here.

The long frame has one row per repeat; `summarize` gives per-cell n, mean, std, CV, min, max, median and
a t-distribution confidence interval; `compare` pairs the cells of two sides and tests each pair with
Welch's t-test plus a minimum effect size. Statuses other than ok are counted, never dropped.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from runner.errors import ConfigError
from runner.results import Status
from runner.spec import PRECISIONS

CONFIDENCE = 0.95
ALPHA = 0.05
MIN_EFFECT = 0.02  # a change below 2% is called noise, however small its p-value

# What identifies a cell in a report (besides the environment) and what pairs cells across sides.
PARAM_KEYS = ("model", "precision", "batch_size", "dataset", "gpus", "nodes", "options")
CELL_KEYS = ("environment", *PARAM_KEYS)
CORE_PARAMS = ("model", "precision", "batch_size", "dataset", "gpus", "nodes")
# The environment capture fields that reports show (bench JSON "env" plus backend extras).
ENV_FIELDS = ("python", "torch", "cuda", "cudnn", "driver", "device", "device_name", "cpu", "hostname",
              "image", "image_id", "repo_digest")
BASELINE_PRECISION = "fp32"


@dataclass(frozen=True)
class Metric:
    """A measured quantity: its frame column, how to name it, and which direction is better."""

    name: str
    label: str
    unit: str
    higher_is_better: bool
    scale: float = 1.0          # stored value x scale = displayed value (bytes -> MiB, s -> ms)
    better: str = "faster"
    worse: str = "slower"
    stored_unit: str = ""

    @property
    def heading(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


METRICS: dict[str, Metric] = {m.name: m for m in (
    Metric("throughput", "throughput", "img/s", True, stored_unit="img/s"),
    Metric("iter_time", "time/iter", "ms", False, 1e3, stored_unit="s"),
    Metric("window_s", "time", "s", False, stored_unit="s"),
    Metric("peak_mem", "peak memory", "MiB", False, 1 / 2**20, "less memory", "more memory", "bytes"),
    Metric("loss_end", "final loss", "", False, 1.0, "lower", "higher"),
    Metric("accuracy", "accuracy", "", True, 1.0, "higher", "lower"),
    Metric("data_wait", "data wait", "%", False, 100.0, "less waiting", "more waiting", "fraction"),
)}
METRIC_ALIASES = {"time": "window_s", "memory": "peak_mem", "mem": "peak_mem", "loss": "loss_end",
                  "iter": "iter_time", "acc": "accuracy"}
STAT_NAMES = ("n", "mean", "std", "cv", "min", "max", "median", "ci_low", "ci_high")

FRAME_COLUMNS = ("id", "run_id", "cell_key", "repeat", "environment", "backend", "tags", *PARAM_KEYS,
                 "status", "reason", "log_tail", "started_at", "finished_at", *METRICS, "hardware",
                 *(f"env_{f}" for f in ENV_FIELDS))


def get_metric(name: str) -> Metric:
    """The metric called `name` (or one of its aliases); a ConfigError lists the known ones."""
    key = METRIC_ALIASES.get(name, name)
    if key not in METRICS:
        known = ", ".join([*METRICS, *METRIC_ALIASES])
        raise ConfigError(f"unknown metric {name!r}; known metrics: {known}")
    return METRICS[key]


# --------------------------------------------------------------------------------------------
# The long frame
# --------------------------------------------------------------------------------------------

def options_label(params: Mapping[str, Any]) -> str:
    """The non-core params of a cell as one stable 'k=v k=v' string, so cells group and pair on it."""
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in CORE_PARAMS and v is not None)


def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _iter_time(metrics: Mapping[str, Any], raw: Mapping[str, Any] | None) -> float:
    times = metrics.get("iter_times")
    if isinstance(times, list) and times:
        vals = [float(t) for t in times if isinstance(t, int | float)]
        if vals:
            return sum(vals) / len(vals)
    iterations = ((raw or {}).get("params") or {}).get("iterations")
    window = _num(metrics.get("window_s"))
    if isinstance(iterations, int) and iterations > 0 and not math.isnan(window):
        return window / iterations
    return math.nan


def _hardware(env: Mapping[str, Any]) -> str:
    """The device a repeat ran on, in words: the GPU's name, else the CPU's."""
    device = str(env.get("device") or "")
    name = env.get("device_name")
    if name and device != "cpu":
        return str(name)
    return str(env.get("cpu") or name or device or "")


def frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per repeat, params and metrics flattened into columns (stored units: s, bytes)."""
    records: list[dict[str, Any]] = []
    for r in rows:
        params = dict(r.get("params") or {})
        metrics = r.get("metrics") or {}
        env = r.get("env") or {}
        window = _num(metrics.get("window_s"))
        wait = _num(metrics.get("data_wait_s"))
        peak = _num(metrics.get("peak_mem_allocated"))
        if math.isnan(peak):
            peak = _num(metrics.get("peak_mem_reserved"))
        rec: dict[str, Any] = {
            "id": r.get("id", len(records)), "run_id": r.get("run_id", ""), "cell_key": r.get("cell_key", ""),
            "repeat": int(r.get("repeat") or 0), "environment": str(r.get("environment", "")),
            "backend": str(r.get("backend", "")), "tags": tuple(str(t) for t in (r.get("tags") or ())),
            "model": str(params.get("model", "")), "precision": str(params.get("precision", "")),
            "batch_size": int(params.get("batch_size") or 0), "dataset": str(params.get("dataset", "")),
            "gpus": int(params.get("gpus") or 1), "nodes": int(params.get("nodes") or 1),
            "options": options_label(params),
            "status": str(r.get("status", "")), "reason": str(r.get("reason") or ""),
            "log_tail": str(r.get("log_tail") or ""),
            "started_at": _num(r.get("started_at")), "finished_at": _num(r.get("finished_at")),
            "throughput": _num(metrics.get("throughput")), "iter_time": _iter_time(metrics, r.get("raw")),
            "window_s": window, "peak_mem": peak, "loss_end": _num(metrics.get("loss_end")),
            "accuracy": _num(metrics.get("accuracy")),
            "data_wait": wait / window if window > 0 and not math.isnan(wait) else math.nan,
            "hardware": _hardware(env),
        }
        for f in ENV_FIELDS:
            value = env.get(f)
            rec[f"env_{f}"] = "" if value is None else str(value)
        records.append(rec)
    return pd.DataFrame.from_records(records, columns=list(FRAME_COLUMNS))


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """Each repeat's newest row (the store is append-only; a re-run supersedes, never deletes)."""
    if df.empty:
        return df
    return df.sort_values("id", kind="stable").drop_duplicates(["cell_key", "repeat"], keep="last")


# --------------------------------------------------------------------------------------------
# Statistics
# --------------------------------------------------------------------------------------------

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


def t_half_width(std: Any, n: Any, confidence: float = CONFIDENCE) -> Any:
    """Half the width of the t-distribution confidence interval of a mean (NaN where n < 2)."""
    n_arr = np.asarray(n, dtype=float)
    df = np.where(n_arr >= 2, n_arr - 1, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return stats.t.ppf(0.5 + confidence / 2, df) * np.asarray(std, dtype=float) / np.sqrt(n_arr)


def describe(values: Sequence[float] | np.ndarray) -> Stats:
    """Statistics of one sample (NaNs ignored): std with ddof=1, CI from the t quantile."""
    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    n = int(x.size)
    if n == 0:
        nan = math.nan
        return Stats(0, nan, nan, nan, nan, nan, nan, nan, nan)
    mean = float(x.mean())
    std = float(x.std(ddof=1)) if n >= 2 else math.nan
    half = float(t_half_width(std, n))
    cv = std / mean if mean != 0 else math.nan
    return Stats(n, mean, std, cv, float(x.min()), float(x.max()), float(np.median(x)), mean - half, mean + half)


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


def summarize(df: pd.DataFrame, keys: Sequence[str] = CELL_KEYS,
              metrics: Sequence[str] = tuple(METRICS)) -> pd.DataFrame:
    """One row per cell: status counts, then `<metric>_<stat>` for every metric over the ok repeats."""
    keys = list(keys)
    stat_cols = [f"{m}_{s}" for m in metrics for s in STAT_NAMES]
    base_cols = [*keys, "n", "n_ok", "status", "statuses", "backend", "tags", "hardware", "run_ids",
                 "reason", "log_tail", *(f"env_{f}" for f in ENV_FIELDS)]
    if df.empty:
        return pd.DataFrame(columns=base_cols + stat_cols)
    df = df.copy()
    df["_first"] = df["id"]
    grouped = df.groupby(keys, sort=False, dropna=False)
    out = grouped.agg(
        n=("status", "size"), _first=("_first", "min"),
        backend=("backend", _join_unique), hardware=("hardware", _join_unique),
        run_ids=("run_id", _join_unique),
        tags=("tags", lambda s: ", ".join(sorted({t for tags in s for t in tags}))),
        **{f"env_{f}": (f"env_{f}", _join_unique) for f in ENV_FIELDS},
    )
    counts = df.groupby([*keys, "status"], sort=False, dropna=False).size().unstack("status", fill_value=0)
    counts = counts.reindex(out.index, fill_value=0)
    out["n_ok"] = counts[Status.OK.value] if Status.OK.value in counts else 0
    out["statuses"] = [status_summary(dict(zip(counts.columns, row, strict=True)))
                       for row in counts.itertuples(index=False)]

    def overall(row: Any) -> str:
        if row.n_ok == row.n:
            return Status.OK.value
        if row.n_ok:
            return "partial"
        bad = {k: v for k, v in zip(counts.columns, counts.loc[row.Index], strict=True) if v}
        return max(sorted(bad), key=lambda k: bad[k])
    out["status"] = [overall(row) for row in out[["n", "n_ok"]].itertuples()]

    bad_rows = df[df["status"] != Status.OK.value].sort_values("id", kind="stable")
    last_bad = bad_rows.groupby(keys, sort=False, dropna=False)[["reason", "log_tail"]].last()
    out = out.join(last_bad)
    out[["reason", "log_tail"]] = out[["reason", "log_tail"]].fillna("")

    ok = df[df["status"] == Status.OK.value]
    metrics = list(metrics)
    if not ok.empty:
        agg = ok.groupby(keys, sort=False, dropna=False)[metrics].agg(
            ["count", "mean", "std", "min", "max", "median"])
        agg.columns = [f"{m}_{'n' if s == 'count' else s}" for m, s in agg.columns]
        out = out.join(agg)
    for m in metrics:
        for s in ("n", "mean", "std", "min", "max", "median"):
            col = f"{m}_{s}"
            if col not in out:
                out[col] = 0 if s == "n" else math.nan
        out[f"{m}_n"] = out[f"{m}_n"].fillna(0).astype(int)
        n, mean, std = out[f"{m}_n"], out[f"{m}_mean"], out[f"{m}_std"]
        out.loc[n < 2, f"{m}_std"] = math.nan
        std = out[f"{m}_std"]
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{m}_cv"] = np.where(mean != 0, std / mean, math.nan)
        half = t_half_width(std.to_numpy(), n.to_numpy())
        out[f"{m}_ci_low"] = mean - half
        out[f"{m}_ci_high"] = mean + half

    out = out.reset_index()
    env_rank = df.groupby("environment", sort=False)["id"].min().rank(method="first")
    prec_rank = {p: i for i, p in enumerate(PRECISIONS)}
    sort = out.assign(
        _env=out["environment"].map(env_rank) if "environment" in out else 0,
        _prec=out["precision"].map(lambda p: prec_rank.get(p, len(prec_rank))) if "precision" in out else 0,
    )
    sort_cols = [c for c in ("_env", "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size")
                 if c in sort]
    sort = sort.sort_values([*sort_cols, "_first"], kind="stable")
    return sort[base_cols + stat_cols].reset_index(drop=True)


# --------------------------------------------------------------------------------------------
# Comparisons
# --------------------------------------------------------------------------------------------

SIDE_KINDS = ("env", "tag", "backend", "run")


@dataclass(frozen=True)
class Side:
    """The rows one side of a comparison selects, and how the reference was understood."""

    ref: str
    kind: str       # env | tag | backend | run
    value: str
    frame: pd.DataFrame

    @property
    def label(self) -> str:
        return self.ref

    @property
    def environments(self) -> list[str]:
        return list(dict.fromkeys(self.frame["environment"]))


def available_sides(df: pd.DataFrame) -> dict[str, list[str]]:
    """What a compare side may name, from the rows in the store."""
    return {
        "env": sorted(set(df["environment"])),
        "tag": sorted({t for tags in df["tags"] for t in tags}),
        "backend": sorted(set(df["backend"])),
        "run": sorted(set(df["run_id"])),
    }


def select_side(df: pd.DataFrame, ref: str) -> Side:
    """Rows matching `ref`: an environment name, else a tag, else a backend kind, else a run id prefix.

    `env:`, `tag:`, `backend:` or `run:` in front of the name chooses the kind when names clash.
    """
    kind, sep, value = ref.partition(":")
    kinds: Sequence[str] = SIDE_KINDS
    if sep and kind in SIDE_KINDS:
        kinds = (kind,)
    else:
        value = ref
    for k in kinds:
        if k == "env":
            mask = df["environment"] == value
        elif k == "tag":
            mask = df["tags"].map(lambda tags: value in tags)
        elif k == "backend":
            mask = df["backend"] == value
        else:
            run_ids = sorted({r for r in df["run_id"] if r.startswith(value)}) if value else []
            if len(run_ids) > 1:
                raise ConfigError(f"run id prefix {value!r} is ambiguous: {', '.join(run_ids)}")
            mask = df["run_id"].isin(run_ids)
        if bool(mask.any()):
            return Side(ref, k, value, latest(df[mask]))
    sides = available_sides(df)
    listed = "; ".join(f"{k}: {', '.join(v) if v else '(none)'}" for k, v in sides.items())
    raise ConfigError(f"{ref!r} matches no result in the store. Sides that exist: {listed}")


def change_words(ratio: float, metric: Metric) -> str:
    """'1.23x faster' for a B/A ratio, in the metric's own words; '' without a ratio."""
    if not ratio or math.isnan(ratio) or ratio <= 0:
        return ""
    gain = ratio if metric.higher_is_better else 1 / ratio
    if f"{gain:.2f}" == "1.00" and f"{1 / gain:.2f}" == "1.00":
        return "1.00x (same)"
    return f"{gain:.2f}x {metric.better}" if gain >= 1 else f"{1 / gain:.2f}x {metric.worse}"


def welch_p(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test; NaN when a side has fewer than two values or no spread."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2 or (np.var(x) == 0 and np.var(y) == 0):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def verdict(ratio: float, p: float, n_a: int, n_b: int, metric: Metric,
            alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> tuple[bool, str]:
    """(significant, words): a change counts only when p < alpha AND it is at least `min_effect`."""
    if n_a == 0 or n_b == 0 or math.isnan(ratio):
        return False, "no result"
    if n_a < 2 or n_b < 2:
        return False, "not tested (needs 2+ repeats per side)"
    if math.isnan(p):
        return False, "not tested (no spread)"
    if p >= alpha:
        return False, "not significant"
    gain = ratio if metric.higher_is_better else 1 / ratio
    if max(gain, 1 / gain) - 1 < min_effect:
        return False, f"not significant (change < {min_effect:.0%})"
    return True, metric.better if gain > 1 else metric.worse


def geometric_mean(ratios: Iterable[float]) -> float:
    """exp(mean(log r)) over the positive, finite ratios; NaN when there are none."""
    vals = np.asarray([r for r in ratios if r is not None and np.isfinite(r) and r > 0], dtype=float)
    return float(np.exp(np.log(vals).mean())) if vals.size else math.nan


@dataclass(frozen=True)
class Comparison:
    """Everything `matrix compare` shows; templates and writers only format these frames."""

    a: Side
    b: Side
    metric: Metric
    alpha: float
    min_effect: float
    pairs: pd.DataFrame             # PARAM_KEYS + a_*/b_* stats, ratio, change, p_value, significant, verdict
    unpaired: pd.DataFrame          # side, PARAM_KEYS, environment(s), statuses
    precision_ratios: pd.DataFrame  # side, PARAM_KEYS - precision, precision, fp32_mean, mean, ratio
    environments: pd.DataFrame      # side, environment, backend, hardware and versions
    geomean: float

    @property
    def geomean_words(self) -> str:
        return change_words(self.geomean, self.metric)

    @property
    def n_significant(self) -> int:
        return int(self.pairs["significant"].sum()) if not self.pairs.empty else 0


def _side_cells(df: pd.DataFrame, metric: str) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Per pairing key: the ok values of the metric, status counts and the environments pooled."""
    cells: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key, g in df.groupby(list(PARAM_KEYS), sort=False, dropna=False):
        ok = g[g["status"] == Status.OK.value][metric].to_numpy(dtype=float)
        ok = ok[~np.isnan(ok)]
        cells[tuple(key)] = {
            "values": ok, "statuses": status_summary(g["status"].value_counts().to_dict()),
            "environments": _join_unique(g["environment"]), "first": int(g["id"].min()),
        }
    return cells


def pair_cells(a: pd.DataFrame, b: pd.DataFrame, metric: Metric, alpha: float = ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair A's and B's cells on their params; returns (pairs, unpaired)."""
    ca, cb = _side_cells(a, metric.name), _side_cells(b, metric.name)
    pair_rows: list[dict[str, Any]] = []
    for key in ca:
        if key not in cb:
            continue
        sa, sb = describe(ca[key]["values"]), describe(cb[key]["values"])
        ratio = sb.mean / sa.mean if sa.n and sb.n and sa.mean != 0 else math.nan
        p = welch_p(ca[key]["values"], cb[key]["values"])
        significant, words = verdict(ratio, p, sa.n, sb.n, metric, alpha, min_effect)
        row: dict[str, Any] = dict(zip(PARAM_KEYS, key, strict=True))
        for side, s, c in (("a", sa, ca[key]), ("b", sb, cb[key])):
            row.update({f"{side}_n": s.n, f"{side}_mean": s.mean, f"{side}_std": s.std,
                        f"{side}_ci_low": s.ci_low, f"{side}_ci_high": s.ci_high,
                        f"{side}_statuses": c["statuses"], f"{side}_environments": c["environments"]})
        row.update({"ratio": ratio, "change": change_words(ratio, metric), "p_value": p,
                    "significant": significant, "verdict": words, "_first": ca[key]["first"]})
        pair_rows.append(row)
    unpaired_rows = []
    for side, mine, other in (("A", ca, cb), ("B", cb, ca)):
        for key, c in mine.items():
            if key not in other:
                unpaired_rows.append({"side": side, **dict(zip(PARAM_KEYS, key, strict=True)),
                                      "environments": c["environments"], "statuses": c["statuses"],
                                      "_first": c["first"]})
    pair_cols = [*PARAM_KEYS, *(f"{s}_{x}" for s in "ab" for x in ("n", "mean", "std", "ci_low", "ci_high",
                                                                      "statuses", "environments")),
                 "ratio", "change", "p_value", "significant", "verdict"]
    pairs = _sorted(pd.DataFrame(pair_rows, columns=[*pair_cols, "_first"]))[pair_cols]
    unpaired = _sorted(pd.DataFrame(unpaired_rows, columns=["side", *PARAM_KEYS, "environments", "statuses",
                                                            "_first"]), ["side"])
    unpaired = unpaired.drop(columns="_first")
    pairs["significant"] = pairs["significant"].astype(bool)
    return pairs.reset_index(drop=True), unpaired.reset_index(drop=True)


def _sorted(df: pd.DataFrame, first: Sequence[str] = ()) -> pd.DataFrame:
    """Rows in report order: model, dataset, options, layout, precision (fp32 first), batch size."""
    if df.empty:
        return df
    prec = {p: i for i, p in enumerate(PRECISIONS)}
    cols = [c for c in (*first, "model", "dataset", "options", "gpus", "nodes", "_prec", "batch_size")
            if c in df or c == "_prec"]
    tmp = df.assign(_prec=df["precision"].map(lambda p: prec.get(p, len(prec))) if "precision" in df else 0)
    return tmp.sort_values([*cols, "_first"] if "_first" in tmp else cols, kind="stable").drop(columns="_prec")


def precision_ratios(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per configuration, each precision's mean throughput over fp32's (the FP16/FP32 speed ratio)."""
    keys = [k for k in PARAM_KEYS if k != "precision"]
    cols = ["side", *keys, "precision", "fp32_mean", "mean", "ratio"]
    ok = df[(df["status"] == Status.OK.value) & df["throughput"].notna()]
    if ok.empty:
        return pd.DataFrame(columns=cols)
    means = ok.groupby([*keys, "precision"], sort=False, dropna=False).agg(
        mean=("throughput", "mean"), _first=("id", "min")).reset_index()
    base = means[means["precision"] == BASELINE_PRECISION][[*keys, "mean"]].rename(columns={"mean": "fp32_mean"})
    merged = means[means["precision"] != BASELINE_PRECISION].merge(base, on=keys, how="inner")
    merged["ratio"] = merged["mean"] / merged["fp32_mean"]
    merged["side"] = side
    return _sorted(merged)[cols].reset_index(drop=True)


def environment_info(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment: backend, hardware and the versions the environment turned out to have."""
    cols = ["side", "environment", "backend", "tags", "hardware", *(f"env_{f}" for f in ENV_FIELDS), "run_ids"]
    if df.empty:
        return pd.DataFrame(columns=cols)
    ok = df[df["status"] == Status.OK.value]
    src = df if ok.empty else pd.concat([ok, df[~df["environment"].isin(ok["environment"])]])
    out = src.sort_values("id", kind="stable").groupby("environment", sort=False).agg(
        backend=("backend", _join_unique), hardware=("hardware", _join_unique),
        tags=("tags", lambda s: ", ".join(sorted({t for tags in s for t in tags}))),
        run_ids=("run_id", _join_unique),
        _first=("id", "min"),
        **{f"env_{f}": (f"env_{f}", _join_unique) for f in ENV_FIELDS},
    ).reset_index()
    out["side"] = side
    return out.sort_values("_first", kind="stable")[cols].reset_index(drop=True)


def compare(a: Side, b: Side, metric: Metric | str = "throughput", alpha: float = ALPHA,
            min_effect: float = MIN_EFFECT) -> Comparison:
    """Side A against side B: pairs with ratio B/A and a verdict, unpaired cells, FP16/FP32 per side."""
    m = get_metric(metric) if isinstance(metric, str) else metric
    shared = set(a.frame["id"]) & set(b.frame["id"])
    if shared:
        envs = _join_unique(a.frame[a.frame["id"].isin(shared)]["environment"])
        raise ConfigError(f"{a.ref!r} and {b.ref!r} select the same results (environment {envs}): "
                          "pick two disjoint sides, e.g. two environment names")
    pairs, unpaired = pair_cells(a.frame, b.frame, m, alpha, min_effect)
    return Comparison(
        a=a, b=b, metric=m, alpha=alpha, min_effect=min_effect, pairs=pairs, unpaired=unpaired,
        precision_ratios=pd.concat([precision_ratios(a.frame, "A"), precision_ratios(b.frame, "B")],
                                   ignore_index=True),
        environments=pd.concat([environment_info(a.frame, "A"), environment_info(b.frame, "B")],
                               ignore_index=True),
        geomean=geometric_mean(pairs["ratio"]) if not pairs.empty else math.nan,
    )


# --------------------------------------------------------------------------------------------
# Scaling and precision summary
# --------------------------------------------------------------------------------------------

def scaling(summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput against processes (gpus x nodes): speedup over the smallest layout and efficiency."""
    cols = ["environment", "model", "precision", "batch_size", "dataset", "options", "gpus", "nodes",
            "processes", "throughput_n", "throughput_mean", "throughput_std", "speedup", "efficiency"]
    ok = summary[summary["throughput_n"] > 0]
    if ok.empty or (ok["gpus"].nunique() < 2 and ok["nodes"].nunique() < 2):
        return pd.DataFrame(columns=cols)
    group = ["environment", "model", "precision", "batch_size", "dataset", "options"]
    df = ok.assign(processes=ok["gpus"] * ok["nodes"])
    rows = []
    for _, g in df.groupby(group, sort=False, dropna=False):
        if len(g) < 2:
            continue
        g = g.sort_values(["processes", "nodes"], kind="stable")
        base = g.iloc[0]
        speedup = g["throughput_mean"] / base["throughput_mean"]
        rows.append(g.assign(speedup=speedup, efficiency=speedup / (g["processes"] / base["processes"])))
    if not rows:
        return pd.DataFrame(columns=cols)
    return pd.concat(rows)[cols].reset_index(drop=True)


def precision_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and precision: time, throughput, memory, accuracy and the ratio to fp32."""
    keys = ["environment", "model", "batch_size", "dataset", "gpus", "nodes", "options"]
    cols = [*keys, "precision", "n", "n_ok", "statuses"]
    ratio_metrics = ("iter_time", "throughput", "peak_mem")
    for m in ("iter_time", "throughput", "peak_mem", "accuracy", "loss_end"):
        cols += [f"{m}_n", f"{m}_mean", f"{m}_std"]
        if m in ratio_metrics:
            cols.append(f"{m}_vs_fp32")
    if summary.empty or summary["precision"].nunique() < 2 or BASELINE_PRECISION not in set(summary["precision"]):
        return pd.DataFrame(columns=cols)
    base = summary[summary["precision"] == BASELINE_PRECISION].set_index(keys)
    out = summary.copy()
    idx = pd.MultiIndex.from_frame(out[keys])
    for m in ratio_metrics:
        ref = base[f"{m}_mean"].reindex(idx).to_numpy()
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"{m}_vs_fp32"] = out[f"{m}_mean"].to_numpy() / ref
    out = out[idx.isin(base.index)]
    # Configuration first, then precision: each fp32 row sits right above the rows compared with it.
    env_rank = {e: i for i, e in enumerate(dict.fromkeys(summary["environment"]))}
    prec_rank = {p: i for i, p in enumerate(PRECISIONS)}
    out = out.assign(_env=out["environment"].map(env_rank),
                     _prec=out["precision"].map(lambda p: prec_rank.get(p, len(prec_rank))))
    out = out.sort_values(["_env", "model", "dataset", "options", "gpus", "nodes", "batch_size", "_prec"],
                          kind="stable")
    return out[cols].reset_index(drop=True)
