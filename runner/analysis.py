"""Statistics over the result store (DESIGN.md step 5): every number a report shows is computed here.

The long frame has one row per repeat; `summarize` gives per-cell n, mean, std, CV, min, max, median and
a t-distribution confidence interval; `compare` pairs the cells of two sides and tests each pair with
Welch's t-test plus a minimum effect size. Statuses other than ok are counted, never dropped.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special  # the t distribution; much lighter to import than scipy.stats

from runner.errors import ConfigError
from runner.results import Status
from runner.spec import PRECISIONS

CONFIDENCE = 0.95
ALPHA = 0.05
MIN_EFFECT = 0.02  # a change below 2% is called noise, however small its p-value
NOISY_CV = 0.10    # throughput that varies more than this between repeats is flagged
DATA_BOUND = 0.10  # a loader that keeps the device waiting more than this share of the window is flagged

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

# How a precision ran (from the bench result's "precision" record): the same word can mean different
# things in different environments (amp: apex in a 2018 image, torch.autocast in a current one).
RECIPE_FIELDS = ("math", "loss_scale", "tf32", "flags", "optimizer")
RECIPE_COLUMNS = tuple(f"recipe_{f}" for f in RECIPE_FIELDS)

FRAME_COLUMNS = ("id", "run_id", "cell_key", "repeat", "environment", "backend", "tags", *PARAM_KEYS,
                 "status", "reason", "log_tail", "started_at", "finished_at", *METRICS, "hardware",
                 *(f"env_{f}" for f in ENV_FIELDS), *RECIPE_COLUMNS, "recipe")


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
    cpu = str(env.get("cpu") or name or device or "")
    count = env.get("cpu_count")
    return f"{cpu} ({count} CPUs)" if cpu and isinstance(count, int) else cpu


DASH_WORD = "—"
_DTYPE_WORDS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "tf32": "fp32"}


def recipe(record: Mapping[str, Any] | None, precision: str = "") -> dict[str, str]:
    """A bench "precision" record in words, one entry per RECIPE_FIELDS; all empty without a record."""
    if not isinstance(record, Mapping):
        return dict.fromkeys(RECIPE_FIELDS, "")
    mechanism = str(record.get("mechanism") or "none")
    dtype = _DTYPE_WORDS.get(str(record.get("dtype")), str(record.get("dtype") or ""))
    if mechanism == "native":
        math_words = f"autocast {dtype}"
    elif mechanism == "apex":
        math_words = f"apex amp {record.get('apex_api') or ''}".strip()
    elif mechanism == "manual":
        math_words = "fp16 model, fp32 master weights" + (", BN in fp32" if record.get("bn_fp32") else "")
    elif precision == "tf32" or record.get("dtype") == "tf32":
        math_words = "fp32 weights, TF32 math"
    else:
        math_words = f"all {dtype}" if dtype else ""
    scale = record.get("loss_scale")
    if scale is None:
        scale_words = DASH_WORD
    elif isinstance(scale, int | float):
        scale_words = f"static {scale:g}"
    else:
        scale_words = str(scale)
    tf32 = (record.get("tf32_matmul"), record.get("tf32_cudnn"))
    if tf32 == (None, None):
        tf32_words = DASH_WORD
    elif tf32[0] == tf32[1]:
        tf32_words = "on" if tf32[0] else "off"
    else:
        tf32_words = f"matmul {'on' if tf32[0] else 'off'}, cuDNN {'on' if tf32[1] else 'off'}"
    flags = [word for key, word in (("channels_last", "channels_last"), ("cudnn_benchmark", "cudnn.benchmark"),
                                    ("compile", "torch.compile")) if record.get(key)]
    optimizer = str(record.get("optimizer") or "")
    impl = optimizer.rsplit("-", 1)[-1] if optimizer.startswith("sgd-") else optimizer
    optimizer_words = {"default": "SGD", "fused": "SGD, fused", "foreach": "SGD, foreach"}.get(impl, optimizer)
    return {"math": math_words, "loss_scale": scale_words, "tf32": tf32_words,
            "flags": ", ".join(flags) or DASH_WORD, "optimizer": optimizer_words or DASH_WORD}



def recipe_text(parts: Mapping[str, str]) -> str:
    """One line for a recipe, e.g. 'autocast fp16 · loss scale dynamic · TF32 off · channels_last'."""
    if not parts.get("math"):
        return ""
    bits = [parts["math"]]
    for field_, label in (("loss_scale", "loss scale "), ("tf32", "TF32 "), ("flags", ""), ("optimizer", "")):
        value = parts.get(field_, "")
        if value and value != DASH_WORD:
            bits.append(label + value)
    return " · ".join(bits)


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
        parts = recipe((r.get("raw") or {}).get("precision"), rec["precision"])
        for f in RECIPE_FIELDS:
            rec[f"recipe_{f}"] = parts[f]
        rec["recipe"] = recipe_text(parts)
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
        return special.stdtrit(df, 0.5 + confidence / 2) * np.asarray(std, dtype=float) / np.sqrt(n_arr)


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
    seen: dict[str, list[dict[str, None]]] = {c: [{} for _ in range(ngroups)] for c in joined}
    tag_sets: list[set[str]] = [set() for _ in range(ngroups)]
    order = np.argsort(df["id"].to_numpy(), kind="stable")  # so "last" means newest
    ids, statuses = df["id"].to_numpy(), df["status"].tolist()
    reasons, tails, tags = df["reason"].tolist(), df["log_tail"].tolist(), df["tags"].tolist()
    values = {c: df[c].tolist() for c in joined if c != "tags"}
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
        for c, vals in values.items():
            v = vals[pos]
            if v != "" and v is not None:
                seen[c][g][str(v)] = None
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
        out[c] = [", ".join(sorted(t)) for t in tag_sets] if c == "tags" else [", ".join(d) for d in seen[c]]
    return out, gid


def _overall_status(counts: Mapping[str, int], n_ok: int, n: int) -> str:
    """ok when every repeat is; 'partial' when some are; else the most frequent other status."""
    if n_ok == n:
        return Status.OK.value
    if n_ok:
        return "partial"
    return max(sorted(counts), key=lambda k: counts[k])


def metric_stats(df: pd.DataFrame, gid: np.ndarray, ngroups: int, metrics: Sequence[str]) -> pd.DataFrame:
    """`<metric>_<stat>` per group over the ok repeats, vectorised: n, mean, std (ddof=1), CV, min, max,
    median and the t confidence interval; std/CV/CI are NaN below two values."""
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
        half = t_half_width(std, n)
        cols.update({f"{m}_n": n, f"{m}_mean": mean, f"{m}_std": std, f"{m}_cv": cv,
                     f"{m}_min": get(f"{m}_min"), f"{m}_max": get(f"{m}_max"),
                     f"{m}_median": get(f"{m}_median"), f"{m}_ci_low": mean - half, f"{m}_ci_high": mean + half})
    return pd.DataFrame(cols, index=index)


def summarize(df: pd.DataFrame, keys: Sequence[str] = CELL_KEYS,
              metrics: Sequence[str] = tuple(METRICS)) -> pd.DataFrame:
    """One row per cell: status counts, then `<metric>_<stat>` for every metric over the ok repeats."""
    keys = list(keys)
    stat_cols = [f"{m}_{s}" for m in metrics for s in STAT_NAMES]
    env_cols = [f"env_{f}" for f in ENV_FIELDS]
    base_cols = [*keys, "n", "n_ok", "status", "statuses", "backend", "tags", "hardware", "run_ids",
                 "reason", "log_tail", *env_cols]
    if df.empty:
        return pd.DataFrame(columns=base_cols + stat_cols)
    attrs, gid = cell_attributes(df.rename(columns={"run_id": "run_ids"}), keys,
                                 ["backend", "tags", "hardware", "run_ids", *env_cols])
    out = pd.concat([attrs, metric_stats(df, gid, len(attrs), metrics)], axis=1)
    env_rank = {e: i for i, e in enumerate(dict.fromkeys(df.sort_values("id")["environment"]))}
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
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, compare=False, repr=False)

    @property
    def label(self) -> str:
        return self.ref

    def stats(self, metric: str) -> pd.DataFrame:
        """This side's cells keyed on params (computed once: a report compares the baseline many times)."""
        if metric not in self._cache:
            self._cache[metric] = side_stats(self.frame, metric)
        return self._cache[metric]

    def precision_ratios(self, label: str) -> pd.DataFrame:
        key = "ratios"
        if key not in self._cache:
            self._cache[key] = precision_ratios(self.frame)
        return self._cache[key].assign(side=label)

    def info(self, label: str) -> pd.DataFrame:
        key = "info"
        if key not in self._cache:
            self._cache[key] = environment_info(self.frame)
        return self._cache[key].assign(side=label)

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
    from scipy import stats

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(x, y, equal_var=False).pvalue)


def welch_p_from_stats(mean_a: Any, std_a: Any, n_a: Any, mean_b: Any, std_b: Any, n_b: Any) -> np.ndarray:
    """Welch's two-sided p-value from each side's mean, std (ddof=1) and n, for whole columns at once:
    the same statistic and Welch–Satterthwaite degrees of freedom as scipy's ttest_ind(equal_var=False)."""
    ma, sa, na = (np.asarray(x, dtype=float) for x in (mean_a, std_a, n_a))
    mb, sb, nb = (np.asarray(x, dtype=float) for x in (mean_b, std_b, n_b))
    with np.errstate(invalid="ignore", divide="ignore"):
        va, vb = sa**2 / na, sb**2 / nb
        se = np.sqrt(va + vb)
        t = (mb - ma) / se
        dof = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
        p = 2 * special.stdtr(dof, -np.abs(t))  # two-sided tail of Student's t
    return np.where((na >= 2) & (nb >= 2) & (se > 0), p, math.nan)


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
    recipes: pd.DataFrame = field(default_factory=pd.DataFrame)  # precision, a, b: ran differently

    @property
    def geomean_words(self) -> str:
        return change_words(self.geomean, self.metric)

    @property
    def n_significant(self) -> int:
        return int(self.pairs["significant"].sum()) if not self.pairs.empty else 0


def side_stats(df: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One side's cells keyed on their params: statuses, environments pooled, and the metric's statistics."""
    attrs, gid = cell_attributes(df.rename(columns={"environment": "environments"}), PARAM_KEYS,
                                 ["environments"])
    st = metric_stats(df, gid, len(attrs), [metric])
    st.columns = [c[len(metric) + 1:] for c in st.columns]
    return pd.concat([attrs[[*PARAM_KEYS, "statuses", "environments", "_first"]], st], axis=1)


def pair_cells(a: pd.DataFrame, b: pd.DataFrame, metric: Metric, alpha: float = ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair A's and B's cells (long frames) on their params; returns (pairs, unpaired)."""
    return pair_stats(side_stats(a, metric.name), side_stats(b, metric.name), metric, alpha, min_effect)


def pair_stats(sa: pd.DataFrame, sb: pd.DataFrame, metric: Metric, alpha: float = ALPHA,
               min_effect: float = MIN_EFFECT) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pair two sides' cell statistics (from side_stats): ratio B/A, Welch p, verdict; and the unpaired."""
    stat_cols = ["n", "mean", "std", "ci_low", "ci_high", "statuses", "environments"]
    pair_cols = [*PARAM_KEYS, *(f"{s}_{x}" for s in "ab" for x in stat_cols),
                 "ratio", "change", "p_value", "significant", "verdict"]
    unpaired_cols = ["side", *PARAM_KEYS, "environments", "statuses"]
    merged = sa.add_prefix("a_").rename(columns={f"a_{k}": k for k in PARAM_KEYS}).merge(
        sb.add_prefix("b_").rename(columns={f"b_{k}": k for k in PARAM_KEYS}),
        on=list(PARAM_KEYS), how="outer", indicator=True, sort=False)
    both = merged[merged["_merge"] == "both"].copy()
    if both.empty:
        pairs = pd.DataFrame(columns=pair_cols)
    else:
        an_, bn_ = both["a_n"].astype(int), both["b_n"].astype(int)
        am, bm = both["a_mean"].to_numpy(dtype=float), both["b_mean"].to_numpy(dtype=float)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where((an_ > 0) & (bn_ > 0) & (am != 0), bm / am, math.nan)
        p = welch_p_from_stats(am, both["a_std"], an_, bm, both["b_std"], bn_)
        judged = [verdict(r, q, x, y, metric, alpha, min_effect)
                  for r, q, x, y in zip(ratio, p, an_, bn_, strict=True)]
        both["a_n"], both["b_n"] = an_, bn_
        both["ratio"], both["p_value"] = ratio, p
        both["change"] = [change_words(r, metric) for r in ratio]
        both["significant"] = [j[0] for j in judged]
        both["verdict"] = [j[1] for j in judged]
        both["_first"] = both["a__first"]
        pairs = _sorted(both)[pair_cols]
    rows = []
    for side, tag in (("A", "left_only"), ("B", "right_only")):
        part = merged[merged["_merge"] == tag]
        low = side.lower()
        rows.append(pd.DataFrame({"side": side, **{k: part[k] for k in PARAM_KEYS},
                                  "environments": part[f"{low}_environments"],
                                  "statuses": part[f"{low}_statuses"], "_first": part[f"{low}__first"]}))
    unpaired = pd.concat(rows, ignore_index=True)
    unpaired = _sorted(unpaired, ["side"])[unpaired_cols] if not unpaired.empty else pd.DataFrame(
        columns=unpaired_cols)
    pairs = pairs.astype({"significant": bool})
    for side in "ab":
        pairs[f"{side}_n"] = pairs[f"{side}_n"].astype(int)
    for k in ("batch_size", "gpus", "nodes"):
        pairs[k] = pairs[k].astype(int)
        unpaired[k] = unpaired[k].astype(int)
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


def precision_recipes(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment and precision, each distinct way it ran (from repeats that got that far) and its cells."""
    cols = ["side", "environment", "precision", *RECIPE_COLUMNS, "recipe", "cells"]
    known = df[df["recipe"] != ""] if "recipe" in df else df.iloc[0:0]
    if known.empty:
        return pd.DataFrame(columns=cols)
    out = known.groupby(["environment", "precision", *RECIPE_COLUMNS, "recipe"], sort=False).agg(
        cells=("cell_key", "nunique"), _first=("id", "min")).reset_index()
    env_rank = {e: i for i, e in enumerate(dict.fromkeys(df.sort_values("id")["environment"]))}
    prec_rank = {p: i for i, p in enumerate(PRECISIONS)}
    out = out.assign(side=side, _env=out["environment"].map(env_rank),
                     _prec=out["precision"].map(lambda p: prec_rank.get(p, len(prec_rank))))
    return out.sort_values(["_env", "_prec", "_first"], kind="stable")[cols].reset_index(drop=True)


def recipe_differences(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Precisions both sides ran, but differently: precision, A's recipes, B's recipes (joined with '; ')."""
    cols = ["precision", "a", "b"]
    ra, rb = precision_recipes(a), precision_recipes(b)
    rows = []
    for p in dict.fromkeys([*ra["precision"], *rb["precision"]]):
        sa = list(dict.fromkeys(ra.loc[ra["precision"] == p, "recipe"]))
        sb = list(dict.fromkeys(rb.loc[rb["precision"] == p, "recipe"]))
        if sa and sb and set(sa) != set(sb):
            rows.append({"precision": p, "a": "; ".join(sa), "b": "; ".join(sb)})
    return pd.DataFrame(rows, columns=cols)


def environment_info(df: pd.DataFrame, side: str = "") -> pd.DataFrame:
    """Per environment: backend, hardware and the versions the environment turned out to have."""
    joined = ["backend", "tags", "hardware", *(f"env_{f}" for f in ENV_FIELDS), "run_ids"]
    cols = ["side", "environment", *joined]
    if df.empty:
        return pd.DataFrame(columns=cols)
    out, _ = cell_attributes(df.rename(columns={"run_id": "run_ids"}), ["environment"], joined)
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
    pairs, unpaired = pair_stats(a.stats(m.name), b.stats(m.name), m, alpha, min_effect)
    return Comparison(
        a=a, b=b, metric=m, alpha=alpha, min_effect=min_effect, pairs=pairs, unpaired=unpaired,
        precision_ratios=pd.concat([a.precision_ratios("A"), b.precision_ratios("B")], ignore_index=True),
        environments=pd.concat([a.info("A"), b.info("B")], ignore_index=True),
        geomean=geometric_mean(pairs["ratio"]) if not pairs.empty else math.nan,
        recipes=recipe_differences(a.frame, b.frame),
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
    df = ok.assign(processes=ok["gpus"] * ok["nodes"]).sort_values(["processes", "nodes"], kind="stable")
    g = df.groupby(group, sort=False, dropna=False)
    df = df[g["processes"].transform("size") >= 2]
    if df.empty:
        return pd.DataFrame(columns=cols)
    g = df.groupby(group, sort=False, dropna=False)
    df = df.assign(speedup=df["throughput_mean"] / g["throughput_mean"].transform("first"))
    df = df.assign(efficiency=df["speedup"] / (df["processes"] / g["processes"].transform("first")))
    # Keep each configuration's layouts together, in the summary's order of configurations.
    first = {k: i for i, k in enumerate(dict.fromkeys(map(tuple, ok[group].itertuples(index=False))))}
    df = df.assign(_cfg=[first[tuple(r)] for r in df[group].itertuples(index=False)])
    return df.sort_values(["_cfg", "processes", "nodes"], kind="stable")[cols].reset_index(drop=True)


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


def quality_flags(summary: pd.DataFrame, noisy_cv: float = NOISY_CV, data_bound: float = DATA_BOUND
                  ) -> pd.DataFrame:
    """Cells whose numbers deserve suspicion: throughput CV above `noisy_cv` across repeats ("noisy"),
    or the data loader waited on for more than `data_bound` of the timed window ("data-bound")."""
    cols = [*CELL_KEYS, "flag", "value"]
    parts = []
    noisy = summary[summary["throughput_cv"] > noisy_cv]
    parts.append(noisy.assign(flag="noisy", value=noisy["throughput_cv"]))
    bound = summary[summary["data_wait_mean"] > data_bound]
    parts.append(bound.assign(flag="data-bound", value=bound["data_wait_mean"]))
    out = pd.concat(parts)
    return out[cols].reset_index(drop=True) if not out.empty else pd.DataFrame(columns=cols)
