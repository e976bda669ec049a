"""docs/gpu-evidence.md and the kit say one thing: GPT-2's least window (plan.LIMITS; the docs said 10 s where the
code asks 5), MLPerf's per-H100 figure (published.json's 7,040; the docs also said about 7,160) and the goal's share
of it, and the first call's contents as `--plan` prints them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from runner.kit import evidence, plan
from runner.kit.cell_results import PUBLISHED_PATH
from tests.conftest import ROOT

DOC = (ROOT / "docs" / "gpu-evidence.md").read_text()


def test_the_gpt2_window_is_the_codes() -> None:
    least = {window for window, _ in plan.LIMITS.values()}
    assert least == {5.0}
    assert "windows of at least 5 s" in DOC and "windows of at least 10 s" not in DOC
    assert "1.1 x 5 s" in DOC and "1.1 x 10 s" not in DOC


def test_mlperf_is_one_figure_everywhere() -> None:
    pub = json.loads(PUBLISHED_PATH.read_text())
    mlperf = pub["resnet50-amp-per-gpu"]["mlperf_img_s"]["H100"]
    figures = {int(m.replace(",", "")) for m in re.findall(r"MLPerf[^.]*?about (\d,\d{3})", DOC)}
    assert figures == {mlperf}, figures
    goal = pub["goals"]["resnet50_img_s"]
    assert f"{goal / mlperf:.2f}x" in pub["goals"]["source"] and f"({goal / mlperf:.2f}x MLPerf's {mlperf:,})" in DOC


def test_the_first_call_in_the_docs_is_the_plans() -> None:
    assert "~528 s of its 540" not in DOC and "call 1 leaves gpt2-first" in DOC


def test_the_docs_first_call_is_what_plan_prints(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The docs' `--plan` lines (the goals' call row by row) are the kit's own, word for word."""
    assert evidence.main(["--plan", "--state", str(tmp_path / "s")]) == 0
    printed = [ln.split("] ", 1)[1] for ln in capsys.readouterr().out.splitlines() if "] " in ln]
    first = [ln for ln in printed if ln.startswith(("call 1 ", "call 1,"))]
    assert len(first) >= 10 and all(ln in DOC for ln in first), [ln for ln in first if ln not in DOC]
