"""The speed levers on a real GPU (`pytest -m gpu`): the whole training step as one CUDA graph trains (its
losses change from step to step and fall), the fused optimizer is the one recorded, and FP16 amp's dynamic loss
scale refuses the graph with its sentence."""

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
