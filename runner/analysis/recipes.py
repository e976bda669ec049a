"""How a precision ran, in words: the benchmark's "precision" record (mechanism, dtype, loss scale, TF32, flags,
optimizer, the units its math ran on) as the report's "How each precision ran" table and the comparisons say it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RECIPE_FIELDS = ("math", "units", "loss_scale", "tf32", "flags", "optimizer")

DASH_WORD = "—"
_DTYPE_WORDS = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "tf32": "fp32"}


def recipe(record: Mapping[str, Any] | None, precision: str = "") -> dict[str, str]:
    """A bench "precision" record in words, one entry per RECIPE_FIELDS; all empty without a record."""
    if not isinstance(record, dict | Mapping):
        return dict.fromkeys(RECIPE_FIELDS, "")
    mechanism = str(record.get("mechanism") or "none")
    dtype = _DTYPE_WORDS.get(str(record.get("dtype")), str(record.get("dtype") or ""))
    if mechanism == "native":
        math_words = f"autocast {dtype}"
    elif mechanism == "apex":
        math_words = f"apex amp {record.get('apex_api') or ''}".strip()
    elif mechanism in ("torchao", "te"):  # bench's fp8: the library, its recipe, BF16 elsewhere
        math_words = f"fp8 {'torchao' if mechanism == 'torchao' else 'Transformer Engine'} {record.get('fp8_recipe')}"
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
                                    ("compile", "torch.compile"), ("cuda_graphs", "CUDA graph"),
                                    ("checkpoint", "activation checkpointing")) if record.get(key) is True]
    if record.get("loss_impl") == "chunked":
        flags.append("chunked cross-entropy")
    optimizer = str(record.get("optimizer") or "")
    name, impl = optimizer.split("-", 1)[0], optimizer.rsplit("-", 1)[-1]
    optimizer_words = optimizer
    if name in ("sgd", "adamw") and impl in ("default", "fused", "foreach", "plain"):
        label = {"sgd": "SGD", "adamw": "AdamW"}[name]
        optimizer_words = label if impl == "default" else f"{label}, {impl}"
    native = record.get("native")
    units_words = str(native.get("unit") or DASH_WORD) if isinstance(native, dict | Mapping) else DASH_WORD
    return {"math": math_words, "units": units_words, "loss_scale": scale_words, "tf32": tf32_words,
            "flags": ", ".join(flags) or DASH_WORD, "optimizer": optimizer_words or DASH_WORD}



def recipe_text(parts: Mapping[str, str]) -> str:
    """One line for a recipe, e.g. 'autocast fp16 · loss scale dynamic · TF32 off · channels_last'."""
    if not parts.get("math"):
        return ""
    bits = [parts["math"]]
    for field_, label in (("units", "on "), ("loss_scale", "loss scale "), ("tf32", "TF32 "), ("flags", ""),
                          ("optimizer", "")):
        value = parts.get(field_, "")
        if value and value != DASH_WORD:
            bits.append(label + value)
    return " · ".join(bits)
