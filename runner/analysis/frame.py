"""The long frame: one row per stored repeat, params, metrics and how each precision ran as columns."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from runner.analysis.admission import Admission, admit
from runner.analysis.figures import figures, ran_program
from runner.analysis.figures import number as _num
from runner.analysis.recipes import RECIPE_FIELDS, recipe, recipe_text
from runner.base.errors import ConfigError
from runner.spec.cells import PRECISIONS

# What identifies a cell in a report (besides the environment) and what pairs cells across sides.
PARAM_KEYS = ("model", "precision", "batch_size", "dataset", "gpus", "nodes", "options")
CELL_KEYS = ("environment", *PARAM_KEYS)
CORE_PARAMS = ("model", "precision", "batch_size", "dataset", "gpus", "nodes")
# The environment capture fields that reports show (bench JSON "env" plus backend extras).
ENV_FIELDS = ("python", "torch", "cuda", "cudnn", "driver", "device", "device_name", "cpu", "hostname",
              "image", "image_id", "repo_digest", "container_runtime", "container_runtime_version")
BASELINE_PRECISION = "fp32"

# Precisions in report order (fp32 first); one ordered categorical is every table's and plot's ranking.
PRECISION_ORDER = pd.CategoricalDtype(list(PRECISIONS), ordered=True)


_PRECISION_INDEX = {p: i for i, p in enumerate(PRECISIONS)}


def precision_rank(values: pd.Series) -> pd.Series:
    """A sort key for a precision column: the contract's order, unknown precisions last (mapped, not cast to the
    ordered categorical: a value outside its categories is an error in the next pandas)."""
    return values.astype(str).map(_PRECISION_INDEX).fillna(len(PRECISIONS)).astype(int)


def precision_index(precision: str) -> int:
    """precision_rank for one value."""
    return PRECISIONS.index(precision) if precision in PRECISIONS else len(PRECISIONS)


def environment_rank(df: pd.DataFrame) -> dict[str, int]:
    """Environments in the order their first result was stored."""
    first = df.sort_values("id")["environment"] if "id" in df else df["environment"]
    return {e: i for i, e in enumerate(dict.fromkeys(first))}


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
    # With bench's --breakdown (axis `breakdown: [true]`): images over rank 0's time in each phase.
    Metric("fwd_throughput", "forward", "img/s", True, stored_unit="img/s"),
    Metric("bwd_throughput", "backward", "img/s", True, stored_unit="img/s"),
    Metric("iter_time", "time/iter", "ms", False, 1e3, stored_unit="s"),
    Metric("window_s", "time", "s", False, stored_unit="s"),
    Metric("peak_mem", "peak memory", "MiB", False, 1 / 2**20, "less memory", "more memory", "bytes"),
    Metric("loss_end", "final loss", "", False, 1.0, "lower", "higher"),
    Metric("accuracy", "accuracy", "", True, 1.0, "higher", "lower"),
    Metric("data_wait", "data wait", "%", False, 100.0, "less waiting", "more waiting", "fraction"),
    # GPU energy over the measured window (bench's telemetry: NVML's energy counter or sampled power).
    Metric("images_per_joule", "energy efficiency", "img/J", True, 1.0, "more efficient", "less efficient",
           "img/J"),
    # A transformer's model FLOPs utilisation (bench's flops.py: the formula and the peak's source per repeat).
    Metric("mfu", "MFU", "%", True, 100.0, "higher", "lower", "fraction"),
)}
METRIC_ALIASES = {"energy": "images_per_joule", "efficiency": "images_per_joule", "forward": "fwd_throughput", "backward": "bwd_throughput", "time": "window_s", "memory": "peak_mem", "mem": "peak_mem", "loss": "loss_end",
                  "iter": "iter_time", "acc": "accuracy"}
STAT_NAMES = ("n", "mean", "std", "cv", "min", "max", "median", "ci_low", "ci_high")

# How a precision ran (from the bench result's "precision" record): the same word can mean different
# things in different environments (amp: apex in a 2018 image, torch.autocast in a current one).
RECIPE_COLUMNS = tuple(f"recipe_{f}" for f in RECIPE_FIELDS)

# The run settings that are part of a cell's definition (runner/spec/cells.py Cell.key) besides its params; the
# store keeps them in each bench result, so a repeat that produced none leaves them unknown ("").
RUN_SETTINGS = ("iterations", "warmup", "seed")

# How a repeat was measured (bench's metrics "warmup", "iterations", "steps", "calibration"; env "cpu_features"):
#   warmup_iters  warm-up iterations run; steady: True (steady), False (a ceiling came first), None (fixed count)
#   warmup_how    "fixed", "steady", "max" or "max_time"; window_iters: measured iterations; steps: training steps
#                 before loss_end (warm-up included); calibrated: this repeat chose the cell's count
#   cpu_native    whether the precision's math is native on this CPU (True/False; None: not a CPU, or unknown);
#   cpu_math      that in words ("bf16 emulated on AVX2"); cpu_why: why not native; load: 1-min load average
MEASURE_COLUMNS = ("warmup_iters", "steady", "warmup_how", "window_iters", "steps", "calibrated", "cpu_native",
                   "cpu_math", "cpu_why", "load", "loss_at")
# Metrics whose value depends on how many training steps came before it: compared only at equal step counts
# (the loss at a step both sides recorded, bench's metrics.loss_at, when their windows differ).
PER_STEP_METRICS = ("loss_end", "accuracy")

# How each metric was obtained and its displayed unit (the shared interface of results: a result's
# metrics.definitions = {metric: {"how": ..., "unit": ...}}); absent = the built-in benchmark's own definition.
# Two repeats whose (how, unit) differ for a metric are never paired or pooled on it.
DEFAULT_HOW = {"throughput": "bench: items over the synchronised measured window"}
DEFINITION_FIELDS = tuple(f"{part}_{m}" for m in METRICS for part in ("how", "unit"))

# Admission (runner/analysis/admission.py): `status` is what the decision core sees (a stored ok that is not
# admitted is diverged or refused), `stored_status` what the store holds, `admission` the failed checks in words
# (or, for an admitted repeat, what deserves a word), `checks` every check; `resolution` the figures' printed
# resolution as the result recorded it ({metric: quantum in stored units}; runner/analysis/resolution.py).
# `printed`: the figures were read from a program's printed output (a workload), so their digits may be all there is.
ADMISSION_COLUMNS = ("stored_status", "admission", "checks", "resolution", "printed")
# `origin`: the id of the store that measured the repeat, from an imported run id `<run>@<store>`; "" for this store's
# own (runner/analysis/identity.py: a cell's identity is its definition and its machine).
FRAME_COLUMNS = ("id", "run_id", "origin", "cell_key", "repeat", "environment", "backend", "tags", *PARAM_KEYS,
                 "settings", "status", *ADMISSION_COLUMNS, "reason", "log_tail", "started_at", "finished_at", *METRICS, "throttled",
                 "hardware", *(f"env_{f}" for f in ENV_FIELDS), *RECIPE_COLUMNS, "recipe", *MEASURE_COLUMNS,
                 *DEFINITION_FIELDS)


# The built-in benchmark's units for a transformer (models gpt_*): its results say so in metrics.definitions, and a
# repeat that measured nothing (unsupported, failed) is labelled as its cell's measured ones are, never img/s.
TOKEN_UNITS = {"throughput": "tok/s", "fwd_throughput": "tok/s", "bwd_throughput": "tok/s", "images_per_joule": "tok/J"}
TOKEN_HOW = "bench: tokens (sequences x seq_len) over the synchronised measured window"


def definition(metrics: Mapping[str, Any], name: str, model: Any = None) -> tuple[str, str]:
    """(how, unit) of one metric of a result: its metrics.definitions entry, else the benchmark's default for its
    `model` (a transformer's throughput is in tok/s)."""
    got = definitions(metrics if isinstance(metrics, Mapping) else {}, model)
    return got[f"how_{name}"], got[f"unit_{name}"]


def shown_unit(units: Iterable[Any], name: str) -> str:
    """The unit to label a column of metric `name` with, from its rows' units (`unit_<m>` values, or ', '-joined
    ones of a summary): the one they share, else each of them ('img/s | tok/s'); the Metric's own when none."""
    seen = dict.fromkeys(u.strip() for v in units if isinstance(v, str) for u in v.split(", ") if u.strip())
    return " | ".join(seen) if seen else METRICS[name].unit


def metric_heading(name: str, units: Iterable[Any] = ()) -> str:
    """'throughput (tok/s)': a metric's label with the unit its rows were measured in."""
    unit = shown_unit(units, name)
    return f"{METRICS[name].label} ({unit})" if unit else METRICS[name].label


def get_metric(name: str) -> Metric:
    """The metric called `name` (or one of its aliases); a ConfigError lists the known ones."""
    key = METRIC_ALIASES.get(name, name)
    if key not in METRICS:
        known = ", ".join([*METRICS, *METRIC_ALIASES])
        raise ConfigError(f"unknown metric {name!r}; known metrics: {known}")
    return METRICS[key]


def options_label(params: Mapping[str, Any]) -> str:
    """The non-core params of a cell as one stable 'k=v k=v' string, so cells group and pair on it."""
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in CORE_PARAMS and v is not None)


def throttled(metrics: Mapping[str, Any]) -> bool:
    """Whether bench's telemetry marked the repeat throttled (False when it says no or does not know)."""
    telemetry = metrics.get("telemetry")
    return isinstance(telemetry, Mapping) and telemetry.get("throttled") is True


def settings_text(raw: Mapping[str, Any] | None) -> str:
    """'iterations=20 warmup=5 seed=0' from a stored bench result; '' when the repeat produced none. An auto rule
    is written as its definition ('iterations=auto(2s,5-10000) warmup=steady(0-50,60s,w5,5%)'), never as the
    count a first repeat calibrated or the warm-up a repeat took: those differ between repeats of one definition."""
    params = (raw or {}).get("params") if isinstance(raw, Mapping) else None
    if not isinstance(params, Mapping) or ran_program(raw):
        return ""  # a workload's program ran its own steps: bench's iterations and warm-up are not what it saw
    words: dict[str, Any] = {k: params.get(k) for k in RUN_SETTINGS}
    if params.get("window_time") is not None:
        words["iterations"] = (f"auto({_g(params['window_time'])}s,{params.get('window_min')}-"
                               f"{params.get('window_max')})")
    if params.get("warmup_max") is not None:
        limit = f",{_g(params['warmup_time'])}s" if params.get("warmup_time") is not None else ""
        tolerance = params.get("steady_tolerance")
        tol = f"{_g(tolerance * 100)}%" if isinstance(tolerance, int | float) else str(tolerance)
        words["warmup"] = (f"steady({params.get('warmup')}-{params['warmup_max']}{limit},w{params.get('steady_window')},"
                           f"{tol})")
    return " ".join(f"{k}={v}" for k, v in words.items() if v is not None)


def _g(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else str(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def measured(r: Mapping[str, Any]) -> dict[str, Any]:
    """The MEASURE_COLUMNS of one stored row: how its warm-up ended, its window, what its CPU did natively."""
    metrics: Mapping[str, Any] = r.get("metrics") or {}
    raw = _mapping(r.get("raw"))
    params = _mapping(raw.get("params"))
    warm = _mapping(metrics.get("warmup"))
    warmup_iters = _int_or_none(warm.get("iterations"))
    program = ran_program(raw)  # a workload: only what the program itself reported
    if warmup_iters is None and params.get("warmup_max") is None and not program:
        warmup_iters = _int_or_none(params.get("warmup"))  # a result from before warm-up was recorded: fixed
    window = _int_or_none(metrics.get("iterations"))
    if window is None and not program:
        window = _int_or_none(params.get("iterations"))
    steps = _int_or_none(metrics.get("steps"))
    if steps is None and warmup_iters is not None and window is not None and params.get("warmup_max") is None:
        steps = warmup_iters + window
    steady = warm.get("steady")
    record = raw.get("precision")
    found = record.get("cpu_math") if isinstance(record, Mapping) else None
    cpu: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    native = cpu.get("native")
    return {"warmup_iters": warmup_iters, "steady": steady if isinstance(steady, bool) else None,
            "warmup_how": str(warm.get("how") or ("fixed" if warmup_iters is not None else "")),
            "window_iters": window, "steps": steps, "calibrated": _calibrated(metrics.get("calibration")),
            "cpu_native": native if isinstance(native, bool) else None, "cpu_math": str(cpu.get("unit") or ""),
            "cpu_why": str(cpu.get("why") or ""), "load": _num(metrics.get("load_avg")),
            "loss_at": _loss_at(metrics.get("loss_at"))}


def _calibrated(record: Any) -> bool:
    """This repeat chose its cell's count (bench's calibration record without `given`: a later repeat, run with the
    count a first one chose, carries the record too, `given` set)."""
    return isinstance(record, Mapping) and record.get("given") is None


def definitions(metrics: Mapping[str, Any], model: Any = None) -> dict[str, str]:
    """The `how_<m>` and `unit_<m>` columns of one repeat: its result's metrics.definitions (keyed on a metric's
    name or alias), else the built-in benchmark's definition for its `model` ("bench: <label>", the Metric's unit;
    a transformer's throughput in tok/s)."""
    from runner.spec.bench_contract import TRANSFORMER_MODELS

    given = _mapping(metrics.get("definitions"))
    tokens = model in TRANSFORMER_MODELS
    if not given and tokens in _BUILT_IN:  # most repeats: the benchmark's own definitions, made once
        return dict(_BUILT_IN[tokens])
    out: dict[str, str] = {}
    for name, m in METRICS.items():
        entry = _mapping(given.get(name))
        if not entry:
            entry = next((_mapping(v) for k, v in given.items() if METRIC_ALIASES.get(str(k)) == name), {})
        how, unit = entry.get("how"), entry.get("unit")
        default_how = TOKEN_HOW if tokens and name in TOKEN_UNITS else DEFAULT_HOW.get(name, f"bench: {m.label}")
        default_unit = TOKEN_UNITS[name] if tokens and name in TOKEN_UNITS else m.unit
        out[f"how_{name}"] = str(how).strip() if isinstance(how, str) and how.strip() else default_how
        out[f"unit_{name}"] = str(unit).strip() if isinstance(unit, str) and unit.strip() else default_unit
    if not given:
        _BUILT_IN[tokens] = dict(out)
    return out


_BUILT_IN: dict[bool, dict[str, str]] = {}  # definitions() of a repeat that states none, image model or transformer


def _loss_at(value: Any) -> dict[int, float] | None:
    """bench's {"step": loss} as {step: loss} (steps as integers, losses that are numbers); None without it."""
    if not isinstance(value, Mapping):
        return None
    out: dict[int, float] = {}
    for k, v in value.items():
        try:
            step = int(k)
        except (TypeError, ValueError):
            continue
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            out[step] = float(v)
    return out


def _hardware(env: Mapping[str, Any]) -> str:
    """The device a repeat ran on, in words: the GPU's name, else the CPU's."""
    device = str(env.get("device") or "")
    name = env.get("device_name")
    if name and device != "cpu":
        return str(name)
    cpu = str(env.get("cpu") or name or device or "")
    count = env.get("cpu_count")
    return f"{cpu} ({count} CPUs)" if cpu and isinstance(count, int) else cpu


def origin_of(name: str) -> str:
    """The store a run id or cell key came from: `<name>@<store id>` for an imported one, "" for this store's own."""
    return name.rpartition("@")[2] if "@" in name else ""


def frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per repeat, params and metrics flattened into columns (stored units: s, bytes)."""
    records = [record(r, i) for i, r in enumerate(rows)]
    return pd.DataFrame.from_records(records, columns=list(FRAME_COLUMNS))


def record(r: Mapping[str, Any], position: int = 0) -> dict[str, Any]:
    """One stored row as the frame's record: its figures, how it was measured and what admission decided."""
    params = dict(r.get("params") or {})
    metrics = r.get("metrics") or {}
    env = r.get("env") or {}
    rec: dict[str, Any] = {
        "id": r.get("id", position), "run_id": r.get("run_id", ""), "origin": origin_of(str(r.get("run_id") or "")),
        "cell_key": r.get("cell_key", ""),
        "repeat": int(r.get("repeat") or 0), "environment": str(r.get("environment", "")),
        "backend": str(r.get("backend", "")), "tags": tuple(str(t) for t in (r.get("tags") or ())),
        "model": str(params.get("model", "")), "precision": str(params.get("precision", "")),
        "batch_size": int(params.get("batch_size") or 0), "dataset": str(params.get("dataset", "")),
        "gpus": int(params.get("gpus") or 1), "nodes": int(params.get("nodes") or 1),
        "options": options_label(params), "settings": settings_text(r.get("raw")),
        "status": str(r.get("status", "")), "reason": str(r.get("reason") or ""),
        "log_tail": str(r.get("log_tail") or ""),
        "started_at": _num(r.get("started_at")), "finished_at": _num(r.get("finished_at")),
        **figures(metrics, r.get("raw")), "throttled": throttled(metrics),
        "hardware": _hardware(env),
    }
    for f in ENV_FIELDS:
        value = env.get(f)
        rec[f"env_{f}"] = "" if value is None else str(value)
    parts = recipe((r.get("raw") or {}).get("precision"), rec["precision"])
    for f in RECIPE_FIELDS:
        rec[f"recipe_{f}"] = parts[f]
    rec["recipe"] = recipe_text(parts)
    rec.update(measured(r))
    rec.update(definitions(metrics if isinstance(metrics, Mapping) else {}, params.get("model")))
    _admit(r, rec, metrics)
    return rec


def admission_of(row: Mapping[str, Any]) -> Admission:
    """What admission decides for one stored row (status, metrics, raw), as the frame's record takes it: for code
    that reads rows without building the frame (the site reads one figure a row)."""
    metrics = row.get("metrics")
    return admit(row, figures(metrics if isinstance(metrics, Mapping) else {}, row.get("raw")))


def admitted_rows(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Store rows as admission sees them, for code that walks rows rather than the frame: `status` and `reason`
    replaced by admission's (a stored ok may be diverged or refused), `stored_status` and `admission` beside them."""
    out = []
    for r in rows:
        rec = record(r)
        row = {**r, "status": rec["status"], "reason": rec["reason"], "stored_status": rec["stored_status"],
               "admission": rec["admission"]}
        left_out = [f for f in rec["_dropped"] if f in _RAW_FIELDS]
        if left_out:  # a figure admission left out (an MFU above 1) is not read from the raw metrics either
            row["metrics"] = {**_mapping(r.get("metrics")), **{k: None for f in left_out for k in _RAW_FIELDS[f]}}
        out.append(row)
    return out


# The raw metrics each figure admission may leave out on its own is read from (runner/analysis/admission.py BOUNDS).
_RAW_FIELDS = {"mfu": ("mfu",), "images_per_joule": ("images_per_joule",), "accuracy": ("accuracy",),
               "peak_mem": ("peak_mem_allocated", "peak_mem_reserved"), "data_wait": ("data_wait_s",),
               "fwd_throughput": ("breakdown",), "bwd_throughput": ("breakdown",)}


def unreachable(row: Mapping[str, Any]) -> str:
    """Why a row's figures are none a machine produces (admission's bounds check failed), '' when they are: an
    import refuses a file that holds one (a figure of 1.7e308 img/s would overflow every mean and ratio built on it)."""
    return next((c.detail for c in record(row)["checks"] if c.name == "bounds" and c.passed is False), "")


def _admit(row: Mapping[str, Any], rec: dict[str, Any], metrics: Any) -> None:
    """The frame's record of one row as admission sees it: the status the decision core uses, the checks, and the
    figures left out on their own (runner/analysis/admission.py)."""
    verdict = admit(row, rec)
    rec["stored_status"] = rec["status"]
    if verdict.changed:
        rec["status"] = verdict.status
        rec["reason"] = verdict.reasons or rec["reason"]
    rec["admission"] = verdict.notes if verdict.admitted else verdict.reasons
    rec["checks"] = verdict.checks
    for name in verdict.dropped:
        rec[name] = math.nan
    rec["_dropped"] = verdict.dropped  # not a frame column: for admitted_rows
    given = _mapping(metrics).get("resolution") if isinstance(metrics, Mapping) else None
    rec["resolution"] = {str(k): float(v) for k, v in _mapping(given).items()
                         if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v > 0}
    rec["printed"] = ran_program(row.get("raw"))


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """Each repeat's newest row (the store is append-only; a re-run supersedes, never deletes)."""
    if df.empty:
        return df
    return df.sort_values("id", kind="stable").drop_duplicates(["cell_key", "repeat"], keep="last")
