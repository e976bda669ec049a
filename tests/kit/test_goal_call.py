"""The first call answers the goals: by the cost model, one lease's call holds the GPU tests, the headline's plain and
fastest rows, two bench-vs-loop pairs, GPT-2 124M's fastest lever set and ResNet-50's, two repeats each, within its
540 s (the plan of before spent call 1 on the headline's three rows at three repeats and left every goal's lever row
to calls 12-18); `--plan` says beside each row the goal it answers; the GPU tests run once a state, within their
own budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runner.kit import evidence, gpu_tests, plan
from runner.kit.settings import options
from tests.conftest import ROOT


def kit_at(tmp_path: Path, *args: str) -> evidence.Kit:
    k = evidence.Kit(options(["--state", str(tmp_path / "s"), "--out", str(tmp_path / "r"), *args]))
    k.write_matrices()
    return k


def test_call_1_holds_each_goals_row_with_two_repeats_within_540_s(tmp_path: Path) -> None:
    k = kit_at(tmp_path)
    calls, deferred = k.calls(k.missing())
    first = calls[0]
    assert {name: n for name, (n, _) in first.items()} == {
        "gpu-tests": 1, "goal-headline": 4, "reference": 2, "goal-gpt2": 2, "goal-resnet50": 2}
    assert sum(t for _, t in first.values()) <= plan.CALL_MEASURE_S
    ph = {p.name: p for p in k.phases}
    ids = {name: [plan.cell_id(c) for c in p.cells] for name, p in ph.items()}
    # the headline's plain row and its fastest honest row (compiled, one CUDA graph), each stored once for both phases
    assert ids["goal-headline"] == [ids["headline"][0], ids["headline"][-1]] and ph["headline"].cells[-1]["compile"]
    assert ph["reference"].reference and ph["reference"].repeats == 2 and ids["reference"] == ids["headline"][:1]
    (gpt,) = ph["goal-gpt2"].cells  # every lever on: the gpt2-levers row it answers for
    assert ids["goal-gpt2"] == [ids["gpt2-levers"][4]]
    assert gpt["optimizer"] == "adamw" and gpt["loss_impl"] == "chunked" and gpt["attention"] == "flash"
    assert gpt["cuda_graphs"] and gpt["compile"] and gpt["model"] == "gpt2_124m"
    (rn,) = ph["goal-resnet50"].cells  # the static FP16 scale as one CUDA graph, compiled: on resnet50-fastest's table
    assert rn["loss_scale"] == 256.0 and rn["cuda_graphs"] and rn["compile"] and rn["model"] == "resnet50"
    assert ids["goal-resnet50"][0] in ids["resnet50-fastest"]
    assert all(ph[n].repeats >= 2 and ph[n].goal for n in ("goal-headline", "reference", "goal-gpt2", "goal-resnet50"))
    assert not set(first) & set(deferred)


def test_max_autotune_is_chosen_where_it_fits_and_the_plan_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model prices max-autotune's compilation at 3x the default's (an estimate): its two repeats (~291 s) do not
    fit beside the other goals' rows, so the default compile answers the goal now and the plan says so."""
    rn = {p.name: p for p in plan.build(data_dir="x")}["goal-resnet50"]
    assert rn.cells[0]["compile_mode"] == "default"
    assert "max-autotune compile (~291 s for 2 repeats) does not fit the ~124 s" in rn.note
    monkeypatch.setitem(plan.COMPILE_MODE_FACTOR, "max-autotune", 1.0)  # as cheap as the default: it fits
    rn = {p.name: p for p in plan.build(data_dir="x")}["goal-resnet50"]
    assert rn.cells[0]["compile_mode"] == "max-autotune" and rn.note == ""


def test_plan_names_each_goal_beside_its_row(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_evidence.py"), "--plan", "--state",
                          str(tmp_path / "s")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    lines = [ln.split("] ", 1)[1] for ln in run.stdout.splitlines() if "] " in ln]
    assert lines[0].startswith("call 1, the goals' call (~537 s of its 540 s")  # call 1 first
    rows = [ln for ln in lines if ln.startswith("call 1 row ")]
    want = {"gpu-tests: The GPU tests: pytest -m gpu tests/bench/test_levers_gpu.py": "the levers' losses against eager",
            "goal-headline: resnet50, amp, eager x 2 of 2 repeats": "every headline row admitted with 2 repeats",
            "goal-headline: resnet50, amp-bf16, fused SGD, one CUDA graph, default compile x 2": "every headline row",
            "reference: bench beside the hand-written loop on resnet50, amp, eager, 2 pairs": "bench within 3% of the "
            "hand-written loop",
            "goal-gpt2: gpt2_124m, amp-bf16, fused adamw, chunked loss, flash attention, one CUDA graph": "GPT-2 124M "
            "MFU at least 45%",
            "goal-resnet50: resnet50, amp, static loss scale 256, fused SGD, one CUDA graph, default compile x 2":
            "ResNet-50 at least 6,500 img/s"}
    for row, goal in want.items():
        (line,) = [ln for ln in rows if row in ln]
        assert f"; answers: {goal}" in line and " s)" in line, line
    assert any("goal-resnet50 is the model's choice: " in ln and "max-autotune" in ln for ln in rows)
    assert any(ln.startswith("call 1 leaves the goal FP8 at least 1.2x bf16 at gpt2_1558m") for ln in lines)
    assert lines.index(rows[-1]) < min(i for i, ln in enumerate(lines) if ln.startswith("phase "))
    assert lines[-1].startswith("plan: ") and any(ln.startswith("call 2 measures headline") for ln in lines)


def gpu_cell(k: evidence.Kit) -> Any:
    return next(c for c in k.cells if c.phase.tests)


def test_the_gpu_tests_run_once_a_state_and_keep_their_log(tmp_path: Path) -> None:
    """On this CPU the GPU tests skip (or, in CI, fail: a missing GPU fails there); either way pytest ran them, the
    log and the record stay in the state, and the step is done: a second call does not run it again."""
    k = kit_at(tmp_path)
    c = gpu_cell(k)
    assert (c, 0) in k.missing() and k.cost(c, 0) == plan.GPU_TESTS_S
    k.say("start")
    assert gpu_tests.run(k, c)
    rec = json.loads((k.state / gpu_tests.RECORD).read_text())
    log = (k.state / gpu_tests.LOG).read_text()
    assert rec["argv"][:4] == ["-m", "pytest", "-m", "gpu"] and "test_levers_gpu.py" in " ".join(rec["argv"])
    assert rec["exit"] in (0, 1) and ("skipped" in rec["summary"] or "failed" in rec["summary"]), rec
    assert "test_levers_gpu" in log or "skipped" in log
    assert (c, 0) not in k.missing()
    (k.state / gpu_tests.LOG).write_text("kept")
    assert gpu_tests.run(k, c) and (k.state / gpu_tests.LOG).read_text() == "kept"
    assert "The GPU tests (`python -m pytest -m gpu" in gpu_tests.words(k.state)


def test_the_gpu_tests_stop_at_their_budget_and_wait_for_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    k = kit_at(tmp_path, "--budget", "30", "--reserve", "0")
    c = gpu_cell(k)
    assert not gpu_tests.run(k, c) and k.stopped == "budget"  # 60 s do not fit 30: next call, nothing recorded
    assert not gpu_tests.done(k.state)
    monkeypatch.setattr(plan, "GPU_TESTS_S", 1.0)  # pytest with torch does not start in a second
    assert gpu_tests.run(k, c)
    rec = json.loads((k.state / gpu_tests.RECORD).read_text())
    assert rec["exit"] is None and rec["summary"].startswith("stopped at its budget of 1 s"), rec
