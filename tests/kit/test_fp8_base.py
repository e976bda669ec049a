"""Every FP8 ratio has one baseline, `bf16`: runner/bench/fp8.py keeps weights and activations in BF16 "as in
`bf16`", so fp8 ÷ bf16 is the linear layers' arithmetic alone. FP8 by size once divided by amp-bf16 (FP32 weights,
autocast) under a column headed "fp8 ÷ bf16", and the goals gave the first run's 0.82x (over amp-bf16; 0.87x over
bf16)."""

from __future__ import annotations

from typing import Any

import pytest

from runner.kit import goals, plan, transformer
from runner.kit.cell_results import CellResult, published
from runner.kit.settings import KitCell
from tests.kit.test_kit import typed

TOK = {"throughput": {"how": "bench: tokens", "unit": "tok/s"}}


def result(model: str, params: dict[str, Any], *values: float) -> CellResult:
    cell = KitCell(plan.Phase("fp8-by-size", "", (), 2), {"model": model, "seq_len": 1024, "batch_size": 16,
                                                           "compile": True, **params}, {}, model + str(params))
    return CellResult(cell, typed([{"status": "ok", "metrics": {"throughput": v, "definitions": TOK}}
                                   for v in values]))


def test_fp8_by_size_divides_by_bf16_as_the_124m_table_does() -> None:
    fp8 = {"precision": "fp8", "fp8_impl": "torchao", "fp8_recipe": "tensorwise"}
    cells = [result("gpt2_1558m", {"precision": "bf16"}, 90.0, 90.0),
             result("gpt2_1558m", {"precision": "amp-bf16"}, 100.0, 100.0),
             result("gpt2_1558m", fp8, 108.0, 108.0)]
    doc: dict[str, Any] = {}
    text = transformer.by_size_section(cells, doc)
    (row,) = doc["fp8-by-size"]
    assert row["ratio_to_bf16"] == pytest.approx(1.2) and row["bf16_mean"] == pytest.approx(90.0)
    assert "FP8 beside bf16" in text and "fp8 ÷ bf16" in text and "amp-bf16 tok/s" not in text
    assert transformer.BASE == "bf16"


def test_every_size_has_a_bf16_cell_beside_fp8() -> None:
    cells = {p.name: p for p in plan.build(data_dir="x")}["fp8-by-size"].cells
    for model in {c["model"] for c in cells}:
        assert {c["precision"] for c in cells if c["model"] == model} >= {"bf16", "fp8"}, model
    small = {p.name: p for p in plan.build(dry=True, data_dir="x")}["fp8-by-size"].cells
    assert {c["precision"] for c in small} == {"bf16", "fp8"}


def test_the_goals_first_run_fp8_figure_is_over_bf16() -> None:
    _, out = goals.section({}, published(), "NVIDIA H100 80GB HBM3")
    text, _ = goals.section({"gpt2": []}, published(), "NVIDIA H100 80GB HBM3")
    assert "0.87x at gpt2_124m" in text and "0.82x" not in text and "FP8 ÷ bf16 at gpt2_1558m" in text
