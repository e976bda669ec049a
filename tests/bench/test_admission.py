"""What the benchmark records for admission (docs/admission.md), with real PyTorch on the CPU: a loss that became
NaN or infinite makes the repeat `diverged` (exit 5, its one result line), every loss is checked, a dynamic loss
scaler's skipped steps are counted, a window shorter than --window-time is re-sized (never stored short), auto never
pairs fused SGD with a dynamic loss scaler (and the hand-written loop chooses as bench does), and fp8's MFU is
against the BF16 dense peak."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import subprocess
import sys
import types
from typing import Any

import pytest
import torch
from torch import nn

from runner.bench import flops, fp8, health, measured, models, timing, training
from runner.bench import main as bench_main_module
from runner.bench.contract import EXIT_DIVERGED, TRANSFORMER_MODELS
from runner.bench.errors import BadArgs
from tests.conftest import ROOT

FAST = ["--threads", "1", "--workers", "0", "--device", "cpu", "--dataset", "synthetic"]
DIVERGE = ["--model", "mlp", "--precision", "fp32", "--batch-size", "16", "--lr", "1e20"]  # NaN from step 2, seed 0
MNIST = ["--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "4"]


def bench(*argv: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    """`python -m runner.bench ARGV` as a process: (exit status, the one result line decoded strictly, stderr)."""
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS")}
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "runner.bench", *argv], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=full)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("MATRIX_RESULT "), (proc.stdout, proc.stderr[-3000:])

    def reject(const: str) -> None:
        raise AssertionError(f"non-JSON constant {const} in the result")

    return proc.returncode, json.loads(lines[0][len("MATRIX_RESULT "):], parse_constant=reject), proc.stderr


# ----------------------------------------------------------------------------- diverged

def test_a_loss_that_becomes_nan_in_the_window_is_diverged_exit_5_with_its_figures() -> None:
    code, r, err = bench(*DIVERGE, "--iterations", "6", "--warmup", "0", *FAST)
    assert code == EXIT_DIVERGED == 5 and r["status"] == "diverged", err
    assert r["reason"].startswith("loss became nan at training step 2 (window); last finite loss 2.28")
    m = r["metrics"]
    assert m["finite"] == {"all": False, "checked_steps": 6, "first_nonfinite_step": 2, "phase": "window",
                           "last_finite_step": 1, "last_finite_loss": m["loss_start"]}
    # The window was finished and its figures kept for the record.
    assert m["iterations"] == 6 and m["throughput"] > 0 and len(m["iter_times"]) == 6
    assert m["losses"][0] is not None and m["losses"][1] is None and m["accuracy"] is None
    assert "diverged: loss became nan" in err


def test_a_warm_up_that_diverges_ends_the_repeat_before_any_window() -> None:
    code, r, err = bench(*DIVERGE, "--iterations", "50", "--warmup", "4", *FAST)
    assert code == 5 and r["status"] == "diverged", err
    assert r["reason"].startswith("loss became nan at training step 2 (warm-up)")
    m = r["metrics"]
    assert m["finite"]["phase"] == "warmup" and m["finite"]["checked_steps"] == 4
    assert m["iterations"] == 0 and m["throughput"] is None and m["window_s"] is None and m["losses"] == []
    assert m["steps"] == 4 and m["warmup"]["iterations"] == 4 and m["loss_at"]["1"] == m["loss_start"]
    assert "no measured window" in err


def test_every_warm_up_step_is_checked_not_only_the_ladder() -> None:
    """Step 3 is not on the loss ladder (1, 2, 5, ...): a NaN there, and only there, is still seen."""
    check = health.FiniteCheck()
    assert check.check([2.3, 2.2, float("nan"), 2.1], "warmup") is True
    rec = check.record()
    assert rec == {"all": False, "checked_steps": 4, "first_nonfinite_step": 3, "phase": "warmup",
                   "last_finite_step": 2, "last_finite_loss": 2.2}
    assert check.reason() == "loss became nan at training step 3 (warm-up); last finite loss 2.2 at step 2"
    assert not timing.loss_step(3)


def test_the_finite_check_counts_steps_across_phases_and_says_inf() -> None:
    check = health.FiniteCheck()
    assert check.check([2.0, 1.9], "warmup") is False
    assert check.check([1.8, 1.7], "window") is False  # a window re-sized away: steps 3-4
    assert check.record() == {"all": True, "checked_steps": 4}
    assert check.check([1.6, float("inf"), float("nan")], "window") is True
    assert check.record()["first_nonfinite_step"] == 6 and check.record()["checked_steps"] == 7
    assert check.reason() == "loss became inf at training step 6 (window); last finite loss 1.6 at step 5"
    first = health.FiniteCheck()
    first.check([float("nan")], "warmup")
    assert first.reason() == "loss became nan at training step 1 (warm-up); no finite loss before it"


class FakeDist:
    """torch.distributed for one rank whose peer saw its first non-finite loss at `peer_step` (MIN is taken)."""

    class ReduceOp:
        MIN = "min"
        MAX = "max"
        SUM = "sum"

    def __init__(self, peer_step: float) -> None:
        self.peer_step = peer_step

    def all_reduce(self, t: torch.Tensor, op: str) -> None:
        assert op == "min"
        t.copy_(torch.minimum(t, torch.full_like(t, self.peer_step)))


def test_ranks_agree_on_the_earliest_non_finite_step_of_any_rank() -> None:
    """This rank's losses are finite; another rank's became NaN at step 3: every rank ends diverged there."""
    check = health.FiniteCheck(FakeDist(3), torch.device("cpu"))
    assert check.check([2.0, 1.9, 1.8, 1.7], "warmup") is True
    assert check.record()["first_nonfinite_step"] == 3
    assert check.reason() == ("loss became NaN or infinite on another rank at training step 3 (warm-up); "
                              "last finite loss 1.9 at step 2")
    calm = health.FiniteCheck(FakeDist(health.NO_STEP), torch.device("cpu"))
    assert calm.check([2.0, 1.9], "warmup") is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_ranks_that_diverge_both_exit_5_and_rank_0_reports() -> None:
    port = str(_free_port())
    argv = [sys.executable, "-m", "runner.bench", *DIVERGE, "--iterations", "5", "--warmup", "3", *FAST]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                                       MASTER_ADDR="127.0.0.1", MASTER_PORT=port)) for rank in (0, 1)]
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        outs.append((proc.returncode, out, err))
    (rc0, out0, err0), (rc1, out1, err1) = outs
    assert rc0 == rc1 == 5, err0[-2000:] + err1[-2000:]
    assert out1 == ""
    r = json.loads(out0.splitlines()[0][len("MATRIX_RESULT "):])
    assert r["status"] == "diverged" and r["metrics"]["finite"]["phase"] == "warmup"
    assert r["metrics"]["world_size"] == 2


def test_a_healthy_run_records_every_step_finite_and_no_scaler(bench_main: Any) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "8", "--iterations", "4",
                     "--warmup", "3", *FAST)
    assert run.rc == 0, run.stderr
    m = run.result["metrics"]
    assert m["finite"] == {"all": True, "checked_steps": 7} and "scaler" not in m
    assert set(m["loss_at"]) == {"1", "2", "5", "7"} and m["loss_at"]["5"] == m["losses"][1]


def test_the_loss_keeper_reads_chunked_device_losses_in_order() -> None:
    """The GPU path (tensors stacked every CHUNK steps, read once) run on CPU tensors."""
    keeper = timing.LossKeeper(on_gpu=True)
    values = [float(i) for i in range(600)]
    values[300] = float("nan")
    for v in values:
        keeper.add(torch.tensor(v))
    assert len(keeper.chunks) == 2 and len(keeper.pending) == 600 - 512
    out = keeper.values()
    assert len(out) == 600 and math.isnan(out[300]) and out[299] == 299.0 and out[599] == 599.0
    assert health.first_nonfinite(out) == 300


# ----------------------------------------------------------------------------- the loss scaler's skipped steps

def _scaled_steps(init_scale: float, watch: bool = True) -> tuple[Any, health.ScalerWatch]:
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
    w = health.ScalerWatch("native", scaler=scaler)
    steps = training.make_steps(model, opt, {"autocast": None, "model_dtype": None}, None, scaler, None,
                                w if watch else None)
    return steps, w


def _train(steps: Any, n: int) -> None:
    forward, backward, update = steps
    x, y = torch.randn(16, 8) * 1000, torch.randint(0, 3, (16,))
    for _ in range(n):
        backward(forward(x, y))
        update()


def test_a_native_grad_scaler_s_skipped_steps_are_counted_per_phase() -> None:
    """A scale so large the scaled gradients overflow: the scaler skips and halves until they fit. Every skip
    halves the scale once (no growth within 2000 steps), so log2(start / end) is the number skipped."""
    steps, watch = _scaled_steps(1e38)
    _train(steps, 4)
    assert watch.take("warmup", 4) == 4  # all four overflowed
    _train(steps, 30)
    window = watch.take("window", 30)
    rec = watch.record()
    assert 0 < window < 30
    assert rec["skipped_warmup"] + rec["skipped_window"] == round(math.log2(1e38 / rec["scale_end"]))
    assert rec == {"kind": "dynamic", "impl": "native", "skipped_warmup": 4, "skipped_resized": 0,
                   "skipped_window": window, "window_steps": 30, "scale_end": rec["scale_end"]}
    calm, quiet = _scaled_steps(2.0)
    _train(calm, 10)
    assert quiet.take("window", 10) == 0 and quiet.record()["scale_end"] == 2.0


def test_apex_s_overflow_flag_is_counted_on_the_host() -> None:
    scaler = types.SimpleNamespace(_has_overflow=False, loss_scale=lambda: 1024.0)
    amp = types.SimpleNamespace(_amp_state=types.SimpleNamespace(loss_scalers=[scaler]))
    watch = health.ScalerWatch("apex", apex_amp=amp)
    for overflow in (True, False, True):
        scaler._has_overflow = overflow
        watch.after_apex_backward()
    assert watch.take("window", 3) == 2 and watch.record()["scale_end"] == 1024.0
    lost = health.ScalerWatch("apex", apex_amp=types.SimpleNamespace())
    lost.after_apex_backward()
    assert lost.record()["skipped_window"] is None and "loss scaler was not found" in lost.record()["why"]


# ----------------------------------------------------------------------------- windows as long as asked

def test_calibration_leaves_out_a_slow_start_a_hundred_times_slower() -> None:
    steady = 0.05
    trace = [100 * steady] * 3 + [steady]  # a warm-up that ended (its time ceiling) one steady iteration in
    n, per_iter = timing.calibrate(trace, 2.0, 3, 10000)
    assert per_iter == steady and n == 42  # 2 s, 5% to spare
    # The steady iterations are every one but the first and those SLOW_FACTOR x slower than the fastest.
    assert timing.steady_times([9.0, 0.05, 3.0, 0.06, 0.05]) == [0.05, 0.06, 0.05]
    assert timing.steady_times([23.73]) == []  # one iteration is all start-up: no estimate
    assert timing.calibrate([23.73], 2.2, 5, 10000) == (5, None)


def test_a_short_window_is_re_sized_from_its_own_times() -> None:
    # The kit's plain repeat: 5 iterations, 0.27 s against 2.2 s asked.
    times = [0.0668, 0.0524, 0.0521, 0.0521, 0.0588]
    n, per_iter = timing.resize(0.27, times, 5, 2.2, 10000)
    assert per_iter == pytest.approx(0.0524) and n == math.ceil(2.2 * 1.1 / 0.0524) == 47
    assert n * min(times) >= 2.2  # long enough even at its fastest iteration
    assert timing.resize(2.3, times, 44, 2.2, 10000) is None  # long enough
    assert timing.resize(0.27, times, 5, 2.2, 20) == (20, pytest.approx(0.0524))  # at most --window-max
    assert timing.resize(0.27, times, 20, 2.2, 20) is None  # at the ceiling already: capped
    assert timing.resize(0.0, [], 0, 2.2, 100) is None
    # A slow first iteration does not shrink the next window: the median speaks for the others.
    assert timing.resize(0.53, [0.5, 0.01, 0.01], 3, 1.0, 10000)[0] == 110


def test_a_calibrating_repeat_with_a_slow_start_stores_a_window_as_long_as_asked() -> None:
    """The H100's story on a CPU: warm-up iterations all slow (the seam), so the window calibrated from them is
    short; it is re-sized from its own times and the count stored for the cell is the re-sized one."""
    code, r, err = bench(*MNIST, "--window-time", "1", "--warmup", "3", *FAST,
                         env={measured.SLOW_START_VAR: "3:0.3"})
    assert code == 0 and r["status"] == "ok", err
    m, cal = r["metrics"], r["metrics"]["calibration"]
    assert m["slow_start"]["steps"] == 3 and "SLEEP 0.3 S EACH" in err
    assert m["window_asked_s"] == 1.0 and m["window_s"] >= 1.0
    assert cal["resized"] and cal["resized"][0]["window_s"] < 1.0 and cal["met"] is True and cal["capped"] is False
    assert cal["iterations"] == m["iterations"] == r["params"]["iterations"] > cal["resized"][-1]["iterations"]
    short = sum(a["iterations"] for a in cal["resized"])
    assert m["steps"] == 3 + short + m["iterations"] == m["finite"]["checked_steps"]
    assert str(m["steps"]) in m["loss_at"] and "re-sized to" in err


def test_a_later_repeat_given_too_few_iterations_re_sizes_itself() -> None:
    code, r, err = bench(*MNIST, "--iterations", "3", "--window-time", "1", "--warmup", "1", *FAST)
    assert code == 0, err
    m, cal = r["metrics"], r["metrics"]["calibration"]
    assert cal["given"] == 3 and cal["resized"][0]["iterations"] == 3 and cal["estimated_from"] == "window"
    assert m["iterations"] == cal["iterations"] > 3 and m["window_s"] >= 1.0 and cal["met"] is True
    assert r["params"]["iterations"] == 3  # the option as given; metrics say what was measured


def test_a_window_at_window_max_may_be_short_and_says_capped(bench_main: Any) -> None:
    run = bench_main(*MNIST, "--iterations", "3", "--window-time", "30", "--window-max", "5", "--warmup", "1", *FAST)
    assert run.rc == 0, run.stderr
    m, cal = run.result["metrics"], run.result["metrics"]["calibration"]
    assert m["iterations"] == 5 and cal["capped"] is True and cal["met"] is False and m["window_s"] < 30
    assert [a["iterations"] for a in cal["resized"]] == [3] and "(capped)" in run.stderr


def test_a_window_long_enough_is_kept_as_it_is(bench_main: Any) -> None:
    run = bench_main(*MNIST, "--iterations", "4", "--window-time", "0.01", "--warmup", "1", *FAST)
    assert run.rc == 0, run.stderr
    cal = run.result["metrics"]["calibration"]
    assert cal["resized"] == [] and cal["met"] is True and run.result["metrics"]["iterations"] == 4


def test_the_slow_start_seam_is_refused_when_malformed() -> None:
    steps = (lambda x, y: x, lambda loss: None, lambda: None)
    for bad in ("3", "x:1", "3:-1", "-1:0.1", "2:nan"):
        with pytest.raises(BadArgs, match="MATRIX_BENCH_SLOW_START"):
            measured.slow_start(steps, {}, {measured.SLOW_START_VAR: bad})
    assert measured.slow_start(steps, {}, {}) is steps


# ----------------------------------------------------------------------------- the plain recipe's optimizer

BOTH = {"fused", "foreach", "lr", "momentum"}


def test_auto_never_pairs_fused_sgd_with_a_dynamic_loss_scaler() -> None:
    choose = training.optimizer_choices
    names = lambda c: [n for n, _ in c[0]]  # noqa: E731
    assert names(choose("auto", "cuda", BOTH, True, False)) == ["fused", "foreach", "default"]
    under, why = choose("auto", "cuda", BOTH, True, True)  # native amp's GradScaler
    assert [n for n, _ in under] == ["foreach", "default"]
    assert why.startswith("auto: foreach, not fused: fused SGD under a dynamic loss scaler corrupts momentum")
    assert "apex" in choose("auto", "cuda", BOTH, False, True)[1]  # apex patches the step
    assert names(choose("auto", "cuda", {"foreach"}, True, False)) == ["foreach", "default"]
    assert names(choose("auto", "cuda", set(), True, True)) == ["default"]
    assert names(choose("auto", "cpu", BOTH, True, True)) == ["default"]
    # Asked for by name, fused runs under the scaler (the finite check and the skip count watch it).
    fused, why = choose("fused", "cuda", BOTH, True, True)
    assert fused == [("fused", {"fused": True})] and "auto avoids" in why
    assert choose("plain", "cuda", BOTH, True, True)[0] == [("plain", {"foreach": False})]


def test_the_choice_and_its_reason_are_in_the_precision_record(bench_main: Any) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "4", "--iterations", "2",
                     "--warmup", "1", *FAST)
    assert run.rc == 0, run.stderr
    rec = run.result["precision"]
    assert rec["optimizer"] == "sgd-momentum-0.9-default" and rec["optimizer_why"].startswith("auto on cpu")


def _reference_loop() -> Any:
    spec = importlib.util.spec_from_file_location("reference_loop", ROOT / "benchmarks" / "reference_loop.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("device", "scaler", "expect"), [
    ("cuda", True, "foreach"), ("cuda", False, "fused"), ("cpu", False, "default"), ("cpu", True, "default")])
def test_the_hand_written_loop_chooses_as_bench_does(device: str, scaler: bool, expect: str) -> None:
    """reference_loop.py's --optimizer auto asks bench's own decision (the optimizers are built on CPU tensors here;
    a torch.device("cuda") object needs no GPU)."""
    params = [nn.Parameter(torch.zeros(3))]
    _, impl, why = _reference_loop().make_sgd(params, "auto", torch.device(device), scaler)
    accepted = training.accepted_kwargs(torch.optim.SGD.__init__)
    assert impl == expect == training.optimizer_choices("auto", device, accepted, True, scaler)[0][0][0]
    assert why == training.optimizer_choices("auto", device, accepted, True, scaler)[1]


# ----------------------------------------------------------------------------- fp8's MFU

H100 = "NVIDIA H100 80GB HBM3"
GPT2_PER_TOKEN = 855_383_040  # 6N + 12LdT of gpt2_124m at 1024 tokens (test_transformer.py)


def test_fp8_mfu_is_against_the_bf16_dense_peak_with_its_fp8_share() -> None:
    weights = 123_568_128  # gpt2_124m's linear layers: 12 x (qkv, proj, fc, out) + the tied head
    out, how = flops.mfu_metrics(337_807.2, GPT2_PER_TOKEN, "f", torch.device("cuda"), H100, "fp8", 1, weights)
    assert out["peak_flops"] == pytest.approx(989.4e12) and out["peak_format"] == "bf16"
    assert out["mfu"] == pytest.approx(337_807.2 * GPT2_PER_TOKEN / 989.4e12) and round(out["mfu"], 3) == 0.292
    assert out["peak_name"] == "H100 SXM5 BF16 dense 989.4 TFLOP/s"
    assert out["fp8_flops_share"] == pytest.approx(6 * weights / GPT2_PER_TOKEN) and 0.86 < out["fp8_flops_share"] < 0.87
    assert how is not None and "BF16 dense peak" in how and "torchao and Transformer Engine" in how
    assert flops.mfu_text(out) == "MFU 29.2% of the BF16 dense peak (FP8 share of FLOPs 87%)"
    # bf16 and the FP8 peak itself are as before; the fp8 entry of the table stays for what it says.
    bf16, _ = flops.mfu_metrics(389_223.8, GPT2_PER_TOKEN, "f", torch.device("cuda"), H100, "bf16", 1)
    assert round(bf16["mfu"], 4) == 0.3365 and "fp8_flops_share" not in bf16 and bf16["peak_format"] == "bf16"
    assert flops.table_peak(H100, "fp8")[0] == pytest.approx(1978.9e12)
    l40s, _ = flops.mfu_metrics(1e5, 1e9, "f", torch.device("cuda"), "NVIDIA L40S", "fp8", 2, None)
    assert l40s["peak_flops"] == pytest.approx(2 * 362.05e12) and l40s["fp8_flops_share"] is None


def test_the_fp8_share_counts_the_converted_layers_of_the_real_model() -> None:
    """Transformer Engine's swap (a stand-in te.Linear) on gpt_small: every linear layer fits (sizes divisible by
    16), the head included; their weights over 6N + 12LdT."""
    class FakeTeLinear(nn.Linear):
        def __init__(self, i: int, o: int, bias: bool = True, params_dtype: Any = None, device: Any = None) -> None:
            super().__init__(i, o, bias=bias)

    model = models.build_transformer("gpt_small")
    count, weights = fp8._swap_te_linear(model, types.SimpleNamespace(Linear=FakeTeLinear))
    layers, heads, width, context, vocab = TRANSFORMER_MODELS["gpt_small"]
    per_layer = width * 3 * width + width * width + 2 * width * 4 * width
    assert count == 4 * layers + 1 and weights == layers * per_layer + width * vocab
    params = sum(p.numel() for p in model.parameters())
    per_token, _ = flops.flops_per_token(params, model.wpe.weight.numel(), layers, width, context)
    share = flops.fp8_flops_share(weights, per_token)
    assert 0 < share < 1 and share == pytest.approx(6 * weights / per_token)


def test_transformer_metrics_reads_the_converted_weights_from_the_precision_record() -> None:
    metrics: dict[str, Any] = {"throughput": 337_807.2, "images": 32 * 1024 * 10}
    workload = {"parameters": 124_475_904, "position_parameters": 1024 * 768, "layers": 12, "width": 768}
    result = {"workload": workload, "env": {"device_name": H100},
              "precision": {"fp8": {"fp8_layers": 49, "fp8_matmul_weights": 123_568_128}}}
    args = types.SimpleNamespace(precision="fp8", seq_len=1024)
    bench_main_module.transformer_metrics(metrics, result, args, torch.device("cuda"), 1)
    assert round(metrics["mfu"], 3) == 0.292 and metrics["fp8_flops_share"] == pytest.approx(0.8667, abs=1e-4)
    assert "BF16 dense peak" in metrics["definitions"]["mfu"]["how"]
    assert metrics["peak_name"] == "H100 SXM5 BF16 dense 989.4 TFLOP/s"

