"""The precision grid never puts losses of different step counts side by side."""

from __future__ import annotations

from typing import Any

from runner import analysis as an
from runner.report.grid import grid_sections


def rows(precision: str, steps: int, final: float, at20: float | None, start: int) -> list[dict[str, Any]]:
    ladder = {"1": 2.3, "10": 2.0, **({"20": at20} if at20 is not None else {}), str(steps): final}
    return [{"id": start + i, "run_id": "r", "cell_key": precision, "repeat": i, "environment": "cpu",
             "status": "ok", "params": {"model": "mnist_cnn", "precision": precision, "batch_size": 32,
                                        "dataset": "synthetic"},
             "metrics": {"throughput": 100.0 + i, "loss_end": final + 0.001 * i, "steps": steps,
                         "loss_at": {k: v + 0.001 * i for k, v in ladder.items()}}}
            for i in range(3)]


def grid_text(df: Any) -> tuple[list[list[str]], str]:
    (section,) = grid_sections(an.summarize(df), df)
    return [[c.text if hasattr(c, "text") else str(c) for c in r] for r in section.table.rows], section.note


def test_losses_after_different_step_counts_are_shown_at_a_common_step() -> None:
    """The quickstart's grid showed final loss 1.664 for fp32 and 0.389 for bf16: windows of 40 and 73 steps."""
    df = an.frame(an.StoredRepeat.many(rows("fp32", 40, 1.664, 1.80, 0) + rows("bf16", 73, 0.389, 1.79, 10)))
    table, note = grid_text(df)
    loss = [r for r in table if r[1].startswith("loss at step 20")]
    assert len(loss) == 2 and all(r[2].startswith("1.8") or r[2].startswith("1.79") for r in loss), table
    assert not any("0.389" in c or "1.664" in c for r in table for c in r)
    assert "step 20" in note and "40, 73" in note


def test_losses_without_a_common_step_are_said_not_comparable() -> None:
    df = an.frame(an.StoredRepeat.many(rows("fp32", 40, 1.664, None, 0) + rows("bf16", 73, 0.389, None, 10)))
    df["loss_at"] = None
    table, note = grid_text(df)
    loss = [r for r in table if "final loss" in r[1]]
    assert all("not comparable" in r[1] for r in loss) and "@ 40 steps" in loss[0][2] + loss[1][2]
    assert "not comparable" in note


def test_equal_step_counts_are_shown_as_measured() -> None:
    df = an.frame(an.StoredRepeat.many(rows("fp32", 40, 1.664, 1.8, 0) + rows("bf16", 40, 1.5, 1.7, 10)))
    table, note = grid_text(df)
    assert any(r[1] == "final loss" for r in table) and note == ""
