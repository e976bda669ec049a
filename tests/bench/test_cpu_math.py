"""Whether a precision's math is native on this CPU (runner/bench/envinfo.py cpu_math), from the CPU's flags, oneDNN's
answer and PyTorch's own dispatch. A note that says "emulated: expect it slower than fp32" beside a bf16 that ran
4x faster than fp32 (Debian's PyTorch 1.13 on an AMX CPU: its own kernels dispatch to AVX2, oneDNN's use AMX) is a
wrong figure's caption: PyTorch's dispatch alone never makes bf16 emulated."""

from __future__ import annotations

from typing import Any

import pytest

from runner.bench.envinfo import cpu_math

AMX = ["avx2", "avx512f", "avx512_bf16", "amx_bf16"]


def feats(flags: list[str], capability: str | None, onednn: bool | None, limit: str | None = None) -> dict[str, Any]:
    return {"flags": flags, "flags_read": True, "torch_capability": capability, "onednn_bf16": onednn,
            "onednn_max_isa": limit}


@pytest.mark.parametrize(("f", "native", "words"), [
    (feats(["avx2"], "AVX2", False), False, "no AVX512-BF16 or AMX-BF16"),            # no hardware: emulated
    (feats(AMX, "AVX2", None), None, "cannot say whether oneDNN uses it"),           # Debian's 1.13: unknown
    (feats(AMX, "AVX2", True), True, "bf16 on AMX-BF16 (element-wise on AVX2)"),    # oneDNN says native
    (feats(AMX, "AVX512", True), True, "bf16 on AMX-BF16"),
    (feats(AMX, "AVX512", False), False, "oneDNN does not use it"),
    (feats(AMX, "AVX512", None, "AVX2"), False, "oneDNN is limited to AVX2"),
])
def test_bf16_is_emulated_only_where_onednn_cannot_use_the_hardware(f: dict[str, Any], native: bool | None,
                                                                     words: str) -> None:
    got = cpu_math("bfloat16", f)
    assert got["native"] is native
    assert words in f"{got['unit']} {got['why']}"
