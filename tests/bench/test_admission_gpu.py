"""What the benchmark records for admission, on a real GPU (`pytest -m gpu`; docs/admission.md): FP16 amp's plain
recipe steps with foreach SGD, not fused, and says why; its loss scaler's skipped steps are counted; fused SGD asked
for by name under the scaler still runs, watched by the finite check; the hand-written loop chooses as bench does;
a calibrated window with cuDNN autotuning in its warm-up is as long as asked."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def _need_cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)")


def bench(*extra: str) -> tuple[int, dict[str, Any]]:
    _need_cuda()
    proc = subprocess.run([sys.executable, "-m", "runner.bench", "--model", "mnist_cnn", "--batch-size", "256",
                           "--dataset", "synthetic", "--device", "cuda", *extra], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return proc.returncode, json.loads(lines[0][len("MATRIX_RESULT "):])


def test_fp16_amp_auto_steps_with_foreach_and_counts_the_scaler_s_skips() -> None:
    code, r = bench("--precision", "amp", "--iterations", "40", "--warmup", "5")
    assert code == 0 and r["status"] == "ok", r.get("reason")
    rec, m = r["precision"], r["metrics"]
    assert rec["optimizer"] == "sgd-momentum-0.9-foreach" and "not fused" in rec["optimizer_why"]
    assert m["finite"] == {"all": True, "checked_steps": 45}
    s = m["scaler"]
    assert s["kind"] == "dynamic" and s["impl"] == "native" and s["window_steps"] == 40
    assert isinstance(s["skipped_window"], int) and 0 <= s["skipped_window"] < 40 and s["scale_end"] > 0


def test_amp_bf16_auto_steps_with_fused_and_has_no_scaler() -> None:
    code, r = bench("--precision", "amp-bf16", "--iterations", "20", "--warmup", "3")
    assert code == 0 and r["status"] == "ok", r.get("reason")
    assert r["precision"]["optimizer"] == "sgd-momentum-0.9-fused" and "scaler" not in r["metrics"]


def test_fused_sgd_named_under_the_scaler_runs_and_is_judged_by_its_losses() -> None:
    code, r = bench("--precision", "amp", "--optimizer-impl", "fused", "--iterations", "60", "--warmup", "5")
    assert r["precision"]["optimizer"] == "sgd-momentum-0.9-fused" and "auto avoids" in r["precision"]["optimizer_why"]
    finite = r["metrics"]["finite"]
    if finite["all"]:
        assert code == 0 and r["status"] == "ok"
    else:  # the momentum bug of some PyTorch releases: diverged, exit 5, its figures kept
        assert code == 5 and r["status"] == "diverged" and "loss became" in r["reason"]


def test_the_hand_written_loop_chooses_as_bench_does() -> None:
    _need_cuda()
    for dtype, expect in (("float16", "foreach"), ("bfloat16", "fused")):
        proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_loop.py"), "--model", "mnist_cnn",
                               "--batch-size", "64", "--dtype", dtype, "--device", "cuda", "--iterations", "5",
                               "--warmup", "2"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["optimizer"] == expect


def test_a_calibrated_window_is_as_long_as_asked_after_cudnn_autotuning() -> None:
    code, r = bench("--precision", "amp-bf16", "--cudnn-benchmark", "--channels-last", "--warmup", "2",
                    "--warmup-max", "200", "--warmup-time", "1", "--window-time", "1.5")
    assert code == 0 and r["status"] == "ok", r.get("reason")
    m = r["metrics"]
    assert m["window_asked_s"] == 1.5 and (m["window_s"] >= 1.5 or m["calibration"]["capped"])
    assert m["calibration"]["iterations"] == m["iterations"] and math.isfinite(m["loss_end"])
