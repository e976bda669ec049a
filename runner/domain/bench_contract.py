"""bench's contract, read from the benchmark itself (runner/bench/contract.py): the one place its
precisions, models, devices, exit codes, result line and argument rules are written (docs/internals.md).

The benchmark runs inside every environment and imports torch, so the controller does not import it:
it reads contract.py's literal constants with `ast`, once, and applies the same argument rules to a
matrix file at plan time that bench's parser applies at run time (tests/domain/test_contract.py checks
that both agree).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

CONTRACT_PATH = Path(__file__).resolve().parents[1] / "bench" / "contract.py"


@cache
def constants(path: Path = CONTRACT_PATH) -> dict[str, Any]:
    """The module-level assignments whose values are literals (`A = 1`, `A, B = 1, 2`)."""
    found: dict[str, Any] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if not isinstance(node, ast.Assign):
            continue
        try:
            value = ast.literal_eval(node.value)
        except ValueError:
            continue
        for target in node.targets:
            if isinstance(target, ast.Name):
                found[target.id] = value
            elif isinstance(target, ast.Tuple) and isinstance(value, tuple) and len(value) == len(target.elts):
                found.update({t.id: v for t, v in zip(target.elts, value, strict=True) if isinstance(t, ast.Name)})
    return found


_C = constants()
SCHEMA: int = _C["SCHEMA"]
RESULT_PREFIX: str = _C["RESULT_PREFIX"]
EXIT_OK: int = _C["EXIT_OK"]
EXIT_FAILED: int = _C["EXIT_FAILED"]
EXIT_BAD_ARGS: int = _C["EXIT_BAD_ARGS"]
EXIT_OOM: int = _C["EXIT_OOM"]
EXIT_UNSUPPORTED: int = _C["EXIT_UNSUPPORTED"]
EXIT_DIVERGED: int = _C["EXIT_DIVERGED"]
WINDOW_REDO_BELOW: float = _C["WINDOW_REDO_BELOW"]
# The exit statuses with which bench printed its result line (every other one is a crash or a bad argument).
RESULT_EXITS: tuple[int, ...] = (EXIT_OK, EXIT_OOM, EXIT_UNSUPPORTED, EXIT_DIVERGED)
PRECISIONS: tuple[str, ...] = tuple(_C["PRECISIONS"])
AMP_IMPLS: tuple[str, ...] = tuple(_C["AMP_IMPLS"])
OPTIMIZERS: tuple[str, ...] = tuple(_C["OPTIMIZERS"])
OPTIMIZER_IMPLS: tuple[str, ...] = tuple(_C["OPTIMIZER_IMPLS"])
LOSS_IMPLS: tuple[str, ...] = tuple(_C["LOSS_IMPLS"])
COMPILE_MODES: tuple[str, ...] = tuple(_C["COMPILE_MODES"])
DEVICES: tuple[str, ...] = tuple(_C["DEVICES"])
BUILTIN_MODELS: tuple[str, ...] = tuple(_C["BUILTIN_MODELS"])
TORCHVISION_MODELS: tuple[str, ...] = tuple(_C["TORCHVISION_MODELS"])
TRANSFORMER_MODELS: dict[str, tuple[int, int, int, int, int]] = _C["TRANSFORMER_MODELS"]
MODELS: tuple[str, ...] = BUILTIN_MODELS + TORCHVISION_MODELS + tuple(TRANSFORMER_MODELS)
ATTENTION_BACKENDS: tuple[str, ...] = tuple(_C["ATTENTION_BACKENDS"])
FP8_IMPLS: tuple[str, ...] = tuple(_C["FP8_IMPLS"])
FP8_RECIPES: tuple[str, ...] = tuple(_C["FP8_RECIPES"])
DATASET_KINDS: tuple[str, ...] = tuple(_C["DATASET_KINDS"])
DATASET_FORMS: tuple[str, ...] = ("synthetic", *(f"{k}:{'PATH' if k in ('npz', 'text') else 'DIR'}"
                                                 for k in DATASET_KINDS))
ARGUMENT_RULES: dict[str, dict[str, Any]] = _C["ARGUMENT_RULES"]
MIN_IMAGE_SIZE: dict[str, int] = _C["MIN_IMAGE_SIZE"]
MIN_IMAGE_SIZE_DEFAULT: int = _C["MIN_IMAGE_SIZE_DEFAULT"]


def value_problem(option: str, value: Any) -> str | None:
    """Why bench would refuse `value` for `option` (words for an error line), or None when it takes it.

    Options without a rule (choices, flags, the model and data set, which spec.py checks) are None."""
    rule = ARGUMENT_RULES.get(option)
    if rule is None or value is None:
        return None
    bad = isinstance(value, bool) or not isinstance(value, int | float)
    if not bad and rule["type"] == "int":
        bad = not float(value).is_integer()
    if not bad:
        v = float(value)
        bad = (not math.isfinite(v) or ("min" in rule and v < rule["min"]) or ("max" in rule and v > rule["max"])
               or ("above" in rule and not v > rule["above"])
               or ("modulo" in rule and int(v) % rule["modulo"][0] != rule["modulo"][1]))
    return f"{value!r} is not allowed; allowed: {rule['allowed']}" if bad else None


def min_image_size(model: str) -> int:
    return int(MIN_IMAGE_SIZE.get(model, MIN_IMAGE_SIZE_DEFAULT))


def cell_problem(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """(option, why) when a cell's options are each allowed but not together; None when bench takes them."""
    size, model, seq_len = params.get("image_size"), params.get("model"), params.get("seq_len")
    if isinstance(seq_len, int) and isinstance(model, str):
        why = seq_len_problem(model, seq_len)
        if why:
            return "seq_len", why
    dataset = params.get("dataset")
    if isinstance(dataset, str) and isinstance(model, str):
        why = dataset_problem(model, dataset)
        if why:
            return "dataset", why
    if isinstance(size, int) and isinstance(model, str) and size < min_image_size(model):
        return "image_size", (f"{size} is too small for model {model}; allowed: at least {min_image_size(model)} "
                              f"for {model} (or exclude the combination: {{model: {model}, image_size: {size}}})")
    return None


def seq_len_problem(model: str, seq_len: int) -> str | None:
    """Why bench refuses --seq-len for `model` (not a transformer, or longer than its context), or None."""
    if model not in TRANSFORMER_MODELS:
        return (f"{seq_len}: seq_len applies to the transformer models ({', '.join(TRANSFORMER_MODELS)}), "
                f"not {model} (or exclude the combination: {{model: {model}, seq_len: {seq_len}}})")
    context = TRANSFORMER_MODELS[model][3]
    if seq_len > context:
        return (f"{seq_len} is longer than model {model}'s context; allowed: at most {context} for {model} "
                f"(or exclude the combination: {{model: {model}, seq_len: {seq_len}}})")
    return None


def dataset_problem(model: str, dataset: str) -> str | None:
    """Why bench refuses `dataset` for `model`: a transformer trains on tokens (synthetic or text:PATH), and
    text:PATH is token data for the transformers only; None when bench takes the pair."""
    text = dataset.partition(":")[0] == "text" and dataset != "text"
    if model in TRANSFORMER_MODELS and not (dataset == "synthetic" or text):
        return (f"{dataset!r}: model {model} trains on tokens; allowed: synthetic or text:PATH "
                f"(or exclude the combination: {{model: {model}, dataset: {dataset}}})")
    if model not in TRANSFORMER_MODELS and text:
        return (f"{dataset!r} is token data for the transformer models ({', '.join(TRANSFORMER_MODELS)}), "
                f"not {model} (or exclude the combination: {{model: {model}, dataset: {dataset}}})")
    return None
