"""The speed levers on a real GPU (`pytest -m gpu`): the whole training step as one CUDA graph trains (its
losses change from step to step and fall), the fused optimizer is the one recorded, and FP16 amp's dynamic loss
scale refuses the graph with its sentence; issue 38's: FP16 with a static loss scale (native or the manual recipe)
as one graph, under max-autotune too, the GPT with AdamW fused, the chunked loss and a forced attention backend as
one graph, and each GPT lever's loss against eager."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def bench(*extra: str) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)")
    proc = subprocess.run([sys.executable, "-m", "runner.bench", "--model", "mnist_cnn", "--batch-size", "256",
                           "--dataset", "synthetic", "--device", "cuda", "--iterations", "40", "--warmup", "5",
                           *extra], capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
    assert lines, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("MATRIX_RESULT "):])
    return result


def test_the_whole_step_as_one_cuda_graph_trains() -> None:
    r = bench("--precision", "amp-bf16", "--channels-last", "--optimizer-impl", "fused", "--cuda-graphs")
    assert r["status"] == "ok", r.get("reason")
    rec, losses = r["precision"], r["metrics"]["losses"]
    assert rec["cuda_graphs"] is True and rec["optimizer"] == "sgd-momentum-0.9-fused"
    assert len(set(losses)) > len(losses) // 2  # each replay's own loss, not the last one repeated
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


def test_fp16_amp_refuses_the_graph_with_its_sentence() -> None:
    r = bench("--precision", "amp", "--cuda-graphs")
    assert r["status"] == "unsupported" and "loss scaling decides on the host" in r["reason"]


# ----------------------------------------------------------------------------- issue 38's levers

def test_fp16_with_a_static_loss_scale_is_one_cuda_graph() -> None:
    """No GradScaler, so no host decision: the FP16 step captured whole, fused SGD allowed, nothing skipped."""
    r = bench("--precision", "amp", "--loss-scale", "1024", "--channels-last", "--optimizer-impl", "fused",
              "--cuda-graphs")
    assert r["status"] == "ok", r.get("reason")
    rec, m = r["precision"], r["metrics"]
    assert rec["loss_scale"] == 1024.0 and rec["cuda_graphs"] is True and rec["optimizer"].endswith("-fused")
    assert "scaler" not in m and m["finite"]["all"] is True
    assert len(set(m["losses"])) > len(m["losses"]) // 2 and sum(m["losses"][-5:]) < sum(m["losses"][:5])


def test_the_manual_recipe_is_one_cuda_graph_too() -> None:
    r = bench("--precision", "amp", "--amp-impl", "manual", "--cuda-graphs")
    assert r["status"] == "ok", r.get("reason")
    assert r["precision"]["master_weights"] is True and r["precision"]["loss_scale"] == 256.0


def test_max_autotune_composes_with_the_static_scale_graph() -> None:
    r = bench("--precision", "amp", "--loss-scale", "1024", "--optimizer-impl", "fused", "--cuda-graphs",
              "--compile", "--compile-mode", "max-autotune")
    assert r["status"] == "ok", r.get("reason")
    assert r["precision"]["compile_mode"] == "max-autotune"
    assert r["precision"]["compile_mode_ran"].startswith("max-autotune-no-cudagraphs")


def gpt(*extra: str) -> dict[str, Any]:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)")
    proc = subprocess.run([sys.executable, "-m", "runner.bench", "--model", "gpt_small", "--batch-size", "8",
                           "--seq-len", "256", "--dataset", "synthetic", "--device", "cuda", "--iterations", "30",
                           "--warmup", "5", *extra], capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
    assert lines, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(lines[-1][len("MATRIX_RESULT "):])
    return result


@pytest.mark.parametrize("attention", ["flash", "cudnn"])
def test_the_gpt_with_every_lever_is_one_cuda_graph(attention: str) -> None:
    """AdamW fused (capturable), the chunked loss, a forced attention backend, the whole step as one graph."""
    r = gpt("--precision", "amp-bf16", "--optimizer", "adamw", "--optimizer-impl", "fused", "--loss-impl", "chunked",
            "--attention", attention, "--cuda-graphs")
    if r["status"] == "unsupported" and attention == "cudnn":
        pytest.skip(r["reason"])  # a cuDNN without its SDPA backend says so in one sentence
    assert r["status"] == "ok", r.get("reason")
    rec, m = r["precision"], r["metrics"]
    assert rec["optimizer"] == "adamw-betas-0.9-0.95-wd-0.1-fused" and rec["loss_impl"] == "chunked"
    assert rec["cuda_graphs"] is True and r["workload"]["attention"]["ran"] == "sdpa " + attention
    assert len(set(m["losses"])) > len(m["losses"]) // 2 and m["loss_end"] < m["loss_start"]


@pytest.mark.parametrize("lever", [["--cuda-graphs"], ["--loss-impl", "chunked"], ["--checkpoint"],
                                   ["--compile"], ["--optimizer-impl", "fused"]])
def test_each_gpt_lever_trains_as_eager_on_the_gpu(lever: list[str]) -> None:
    """FP32 with TF32 off, AdamW: the loss ladder of eager and of each lever at the same steps. Tolerance 1e-3
    relative: the GPU's own non-determinism (atomic adds in the embedding's backward, cuBLAS's split-K choices per
    shape, inductor's fusions) moves each step by about FP32's epsilon, which 35 steps of AdamW amplify; a wrong
    lever moves the loss by tenths (tests/bench/test_lever_losses.py measures the same on a CPU)."""
    base = ("--precision", "fp32", "--optimizer", "adamw", "--optimizer-impl", "plain", "--lr", "0.001",
            "--attention", "math")  # a lever's own --optimizer-impl comes later and wins
    eager = gpt(*base)
    other = gpt(*base, *lever)
    assert eager["status"] == other["status"] == "ok", (eager.get("reason"), other.get("reason"))
    a, b = eager["metrics"]["loss_at"], other["metrics"]["loss_at"]
    assert set(a) == set(b) and len(a) >= 4
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-3), (step, a, b)
