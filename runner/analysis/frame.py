"""The long frame: one row per stored repeat, params, metrics and how each precision ran as columns."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd

from runner.analysis.recipes import RECIPE_FIELDS, recipe, recipe_text
from runner.domain.cells import PRECISIONS
from runner.record.measurement import measured, resolution
from runner.record.metrics import METRICS, definition_fields, definitions
from runner.record.metrics import (
    get_metric as get_metric,  # where runner/commands/bisect.py imports it from
)
from runner.record.readers import number as _num
from runner.record.readers import ran_program
from runner.record.stored import StoredRepeat

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


STAT_NAMES = ("n", "mean", "std", "cv", "min", "max", "median", "ci_low", "ci_high")

# How a precision ran (from the bench result's "precision" record): the same word can mean different
# things in different environments (amp: apex in a 2018 image, torch.autocast in a current one).
RECIPE_COLUMNS = tuple(f"recipe_{f}" for f in RECIPE_FIELDS)

# The run settings that are part of a cell's definition (runner/domain/cells.py Cell.key) besides its params; the
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
# How each metric was obtained and its displayed unit (`how_<m>`, `unit_<m>`: runner/record/metrics.py
# `definitions`, from a result's metrics.definitions = {metric: {"how": ..., "unit": ...}}, else the built-in
# benchmark's own). Two repeats whose (how, unit) differ for a metric are never paired or pooled on it.

# Admission (runner/record/admission.py): `status` is what the decision core sees (a stored ok that is not
# admitted is diverged or refused), `stored_status` what the store holds, `admission` the failed checks in words
# (or, for an admitted repeat, what deserves a word), `checks` every check; `resolution` the figures' printed
# resolution as the result recorded it ({metric: quantum in stored units}; runner/analysis/resolution.py).
# `printed`: the figures were read from a program's printed output (a workload), so their digits may be all there is.
ADMISSION_COLUMNS = ("stored_status", "admission", "checks", "resolution", "printed")
# `seq`: the repeat's row in the store that measured it (its own id here; an imported one's row there): the order in
# which a re-run supersedes, whatever order files were imported in (runner/record/stored.py StoredRepeat.seq).
# `origin`: the id of the store that measured the repeat, from an imported run id `<run>@<store>`; "" for this store's
# own (runner/analysis/identity.py: a cell's identity is its definition and its machine).


def present(df: pd.DataFrame, names: Iterable[str]) -> list[str]:
    """The columns among `names` that the frame has, in order, each once: what a function copies when it reads a few
    columns of the wide frame (a hand-built frame may lack some; reading one then fails where it is read)."""
    return [c for c in dict.fromkeys(names) if c in df]


def frame_columns() -> list[str]:
    """The frame's columns: one per metric of the table (runner/record/metrics.py) and its definition's two."""
    return ["id", "seq", "run_id", "origin", "cell_key", "repeat", "environment", "backend", "tags", *PARAM_KEYS, "settings",
            "status", *ADMISSION_COLUMNS, "reason", "log_tail", "started_at", "finished_at", *METRICS, "throttled",
            "hardware", *(f"env_{f}" for f in ENV_FIELDS), *RECIPE_COLUMNS, "recipe", *MEASURE_COLUMNS,
            *definition_fields()]


def options_label(params: Mapping[str, Any]) -> str:
    """The non-core params of a cell as one stable 'k=v k=v' string, so cells group and pair on it."""
    return " ".join(f"{k}={v}" for k, v in sorted(params.items()) if k not in CORE_PARAMS and v is not None)


def throttled(metrics: Mapping[str, Any]) -> bool:
    """Whether bench's telemetry marked the repeat throttled (False when it says no or does not know)."""
    telemetry = metrics.get("telemetry")
    return telemetry is not None and isinstance(telemetry, dict | Mapping) and telemetry.get("throttled") is True


def settings_text(raw: Mapping[str, Any] | None) -> str:
    """'iterations=20 warmup=5 seed=0' from a stored bench result; '' when the repeat produced none. An auto rule
    is written as its definition ('iterations=auto(2s,5-10000) warmup=steady(0-50,60s,w5,5%)'), never as the
    count a first repeat calibrated or the warm-up a repeat took: those differ between repeats of one definition."""
    params = (raw or {}).get("params") if isinstance(raw, dict | Mapping) else None
    if not isinstance(params, dict | Mapping) or ran_program(raw):
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
    return value if isinstance(value, dict | Mapping) else {}


def _hardware(env: Mapping[str, Any]) -> str:
    """The device a repeat ran on, in words: the GPU's name, else the CPU's."""
    device = str(env.get("device") or "")
    name = env.get("device_name")
    if name and device != "cpu":
        return str(name)
    cpu = str(env.get("cpu") or name or device or "")
    count = env.get("cpu_count")
    return f"{cpu} ({count} CPUs)" if cpu and isinstance(count, int) else cpu


_ENV_COLUMNS = tuple((f, f"env_{f}") for f in ENV_FIELDS)
_RECIPE_COLUMNS = tuple(zip(RECIPE_FIELDS, RECIPE_COLUMNS, strict=True))


def frame(rows: Iterable[StoredRepeat]) -> pd.DataFrame:
    """One row per repeat, params and metrics flattened into columns (stored units: s, bytes). The repeats are typed
    (Store.rows(); a test's mappings through StoredRepeat.of): a dict is refused here, not read by string."""
    made: Made = {}
    records = [record(r, made) for r in rows]
    return pd.DataFrame.from_records(records, columns=frame_columns())


def _params_columns(params: Mapping[str, Any]) -> dict[str, Any]:
    get = params.get
    return {"model": str(get("model", "")), "precision": str(get("precision", "")),
            "batch_size": int(get("batch_size") or 0), "dataset": str(get("dataset", "")),
            "gpus": int(get("gpus") or 1), "nodes": int(get("nodes") or 1), "options": options_label(params)}


def _env_columns(env: Mapping[str, Any]) -> dict[str, Any]:
    found = env.get
    out = {column: "" if (value := found(f)) is None else str(value) for f, column in _ENV_COLUMNS}
    out["hardware"] = _hardware(env)
    return out


def _raw_columns(raw: Mapping[str, Any] | None, precision: str) -> dict[str, Any]:
    parts = recipe((raw or {}).get("precision"), precision)
    return {"settings": settings_text(raw), **{column: parts[f] for f, column in _RECIPE_COLUMNS},
            "recipe": recipe_text(parts)}


# The columns read from each document object so far: (kind, id) -> (the document, the other arguments, its columns).
Made = dict[tuple[str, int], tuple[Any, tuple[Any, ...], dict[str, Any]]]


def _once(made: Made | None, kind: str, doc: Any, *args: Any, make: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    """The columns `make` reads from a document, made once per document object: the store shares a document many
    rows hold alike (Store.rows()), and the record's documents are read-only."""
    if made is None or doc is None:
        return make(doc, *args)
    found = made.get((kind, id(doc)))
    if found is not None and found[0] is doc and found[1] == args:
        return found[2]
    columns = make(doc, *args)
    made[(kind, id(doc))] = (doc, args, columns)
    return columns


def record(r: StoredRepeat, made: Made | None = None) -> dict[str, Any]:
    """One stored repeat as the frame's record: its figures, how it was measured and what admission decided.
    `made`: the columns read from documents so far (frame()'s, for the whole store)."""
    if not isinstance(r, StoredRepeat):
        raise TypeError(f"the frame reads StoredRepeat records (Store.rows()), not {type(r).__name__}: build one with "
                        "StoredRepeat.of(mapping)")
    params, metrics, env, raw = r.params, r.metrics, r.env, r.raw
    by_params = _once(made, "params", params, make=_params_columns)
    rec: dict[str, Any] = {
        "id": r.id, "seq": r.seq, "run_id": r.run_id, "origin": r.origin.store, "cell_key": r.cell_key, "repeat": r.repeat,
        "environment": r.environment, "backend": r.backend, "tags": r.tags, **by_params,
        "status": r.status, "reason": r.reason, "log_tail": r.log_tail,
        "started_at": _num(r.started_at), "finished_at": _num(r.finished_at),
        **r.figures, "throttled": throttled(metrics), **_once(made, "env", env, make=_env_columns),
        **_once(made, "raw", raw, by_params["precision"], make=_raw_columns),
    }
    rec.update(measured(r))
    rec.update(definitions(metrics, params.get("model")))
    _admit(r, rec)
    return rec


def _admit(r: StoredRepeat, rec: dict[str, Any]) -> None:
    """The frame's record of one repeat as admission sees it: the status the decision core uses, the checks, and the
    figures left out on their own (runner/record/admission.py)."""
    verdict = r.admission
    rec["stored_status"] = rec["status"]
    if verdict.changed:
        rec["status"] = verdict.status
        rec["reason"] = verdict.reasons or rec["reason"]
    rec["admission"] = verdict.notes if verdict.admitted else verdict.reasons
    rec["checks"] = verdict.checks
    for name in verdict.dropped:
        rec[name] = math.nan
    rec["resolution"] = resolution(r.metrics)
    rec["printed"] = ran_program(r.raw)


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """Each repeat's newest row (the store is append-only; a re-run supersedes, never deletes), in the order of the
    store that measured it (`seq`: StoredRepeat.seq), as Store.rows(latest_only=True) chooses."""
    if df.empty:
        return df
    # The order and the duplicates from four columns, then one take of the rows: a wide frame is copied once.
    narrow = pd.DataFrame({c: df[c].to_numpy() for c in ("seq", "id", "cell_key", "repeat")})
    kept = narrow.sort_values(["seq", "id"], kind="stable").drop_duplicates(["cell_key", "repeat"], keep="last")
    return df.iloc[kept.index.to_numpy()]
