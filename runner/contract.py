"""bench.py's contract, read from bench.py itself: the one place precisions, models, devices, exit codes
and the result line are written (docs/internals.md).

bench.py is copied into every environment and imports torch at its top, so the controller does not import
it: it reads the module's literal constants from its source with `ast`, once.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

BENCH_PATH = Path(__file__).with_name("bench") / "bench.py"


@cache
def constants(path: Path = BENCH_PATH) -> dict[str, Any]:
    """bench.py's module-level assignments whose values are literals (`A = 1`, `A, B = 1, 2`)."""
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
DEVICES: tuple[str, ...] = tuple(_C["DEVICES"])
BUILTIN_MODELS: tuple[str, ...] = tuple(_C["BUILTIN_MODELS"])
TORCHVISION_MODELS: tuple[str, ...] = tuple(_C["TORCHVISION_MODELS"])
MODELS: tuple[str, ...] = BUILTIN_MODELS + TORCHVISION_MODELS
DATASET_KINDS: tuple[str, ...] = tuple(_C["DATASET_KINDS"])
DATASET_FORMS: tuple[str, ...] = ("synthetic", *(f"{k}:{'PATH' if k == 'npz' else 'DIR'}" for k in DATASET_KINDS))
