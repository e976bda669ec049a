"""bench's contract, read from the benchmark itself (runner/bench/contract.py): the one place its
precisions, models, devices, exit codes, result line and argument rules are written (docs/internals.md).

The benchmark runs inside every environment and imports torch, so the controller does not import it:
it reads contract.py's literal constants with `ast`, once, and applies the same argument rules to a
matrix file at plan time that bench's parser applies at run time (tests/unit/test_contract.py checks
that both agree).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

CONTRACT_PATH = Path(__file__).with_name("bench") / "contract.py"


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
PRECISIONS: tuple[str, ...] = tuple(_C["PRECISIONS"])
AMP_IMPLS: tuple[str, ...] = tuple(_C["AMP_IMPLS"])
OPTIMIZER_IMPLS: tuple[str, ...] = tuple(_C["OPTIMIZER_IMPLS"])
COMPILE_MODES: tuple[str, ...] = tuple(_C["COMPILE_MODES"])
DEVICES: tuple[str, ...] = tuple(_C["DEVICES"])
BUILTIN_MODELS: tuple[str, ...] = tuple(_C["BUILTIN_MODELS"])
TORCHVISION_MODELS: tuple[str, ...] = tuple(_C["TORCHVISION_MODELS"])
MODELS: tuple[str, ...] = BUILTIN_MODELS + TORCHVISION_MODELS
DATASET_KINDS: tuple[str, ...] = tuple(_C["DATASET_KINDS"])
DATASET_FORMS: tuple[str, ...] = ("synthetic", *(f"{k}:{'PATH' if k == 'npz' else 'DIR'}" for k in DATASET_KINDS))
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
    size, model = params.get("image_size"), params.get("model")
    if isinstance(size, int) and isinstance(model, str) and size < min_image_size(model):
        return "image_size", (f"{size} is too small for model {model}; allowed: at least {min_image_size(model)} "
                              f"for {model} (or exclude the combination: {{model: {model}, image_size: {size}}})")
    return None
