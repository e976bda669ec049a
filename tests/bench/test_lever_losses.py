"""Every speed lever that exists on a CPU trains to the same loss as eager without it: the same seed, the same
batches, the same steps, wired by bench itself (its parser, precision plan and setup_training), the loss after each
step compared within a stated tolerance.

Tolerances (docs/internals.md, "Each lever's loss against eager"). The levers change the order of the arithmetic,
never the arithmetic: foreach and fused AdamW update the same tensors in other kernels, the chunked loss sums its
chunks' losses and the output projection's gradient chunk by chunk, inductor fuses and reorders reductions. In FP32
each reordering rounds differently by about FP32's epsilon (1.2e-7) a step; over 20 steps of a model whose loss
falls from 5.6 to 1.6 the measured differences are at most 2.5e-7 (relative), so FP32 levers are held to 1e-5:
forty times that, and a thousand times below what a wrong lever gives (a chunk boundary off by one row, a gradient
divided by the chunk's rows instead of all rows, the last partial chunk dropped: 0.4 to 2.2, relative). Under BF16
autocast the chunked loss sums the output projection's gradient over its chunks in FP32 where the plain one rounds the
whole sum to BF16 once: the first step's loss is the same, then the two trajectories part at BF16's rounding, which
this training amplifies as much as a learning rate 0.1% higher does (3e-3 after 20 steps, measured both ways): held
to 1e-2, BF16's epsilon (7.8e-3) with room, still forty times below a wrong lever. Checkpointing recomputes the very
same operations: 1e-6. The flash attention backend (the one fused SDPA kernel this CPU has) against math, the
reference: FP32's 1e-5 and, under BF16 autocast, 1e-2 (3.6e-3 measured). SGD's implementations:
test_lever_losses_sgd.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from runner.bench import args as bench_args
from runner.bench import attention, contract, levers, main, models, precision, training
from runner.bench.errors import Unsupported

STEPS = 20
FP32_RTOL = 1e-5      # foreach/fused AdamW, the chunked loss, torch.compile: the same sums in another order
BF16_RTOL = 1e-2      # the chunked loss under BF16 autocast: the projection's gradient summed in FP32, not BF16
RECOMPUTE_RTOL = 1e-6  # checkpointing: the same operations run again
ROWS = 7               # 4 x 16 = 64 rows in chunks of 7: nine whole chunks and a partial one


def train(*extra: str, precision_name: str = "fp32", lr: str = "0.1", steps: int = STEPS,
          model_name: str = "gpt_tiny") -> tuple[list[float], torch.nn.Module]:
    """Every step's loss of the tiny GPT trained on two fixed batches in turn (the loss falls: each lever's error
    would change the trajectory), wired as bench wires it (--attention planned and probed as bench plans it)."""
    torch.set_num_threads(1)
    args = bench_args.parse_args(["--model", model_name, "--precision", precision_name, "--batch-size", "4",
                                  "--seq-len", "16", "--dataset", "synthetic", "--device", "cpu", "--lr", lr, *extra])
    device = torch.device("cpu")
    plan = precision.plan_precision(args, device)
    levers.check_levers(args, plan)
    _, heads, width, _, _ = contract.TRANSFORMER_MODELS[model_name]
    dtype = getattr(torch, main.COMPUTE_DTYPES[plan["dtype"]])  # --attention as bench plans it, probe included
    sdpa, kernel, _ = attention.attention_plan(args.attention, device, dtype, heads, width // heads)
    torch.manual_seed(0)
    model = models.build_transformer(model_name, sdpa, kernel)
    wrapped, _, (forward, backward, update), _, _ = training.setup_training(model, plan, args, device, (0, 1, 0))
    g = torch.Generator().manual_seed(1)
    pool = [(torch.randint(0, 256, (4, 16), generator=g), torch.randint(0, 256, (64,), generator=g)) for _ in range(2)]
    losses = run_steps(pool, steps, forward, backward, update)
    return losses, model


def run_steps(pool: list[tuple[torch.Tensor, torch.Tensor]], steps: int, forward: Any, backward: Any,
              update: Any) -> list[float]:
    """`steps` training steps on the pool's batches in turn, as bench's window runs them: every step's loss."""
    losses = []
    for i in range(steps):
        x, y = pool[i % 2]
        loss = forward(x, y)
        backward(loss)
        update()
        losses.append(float(loss.item()))
    return losses


def assert_same_training(eager: list[float], lever: list[float], rtol: float) -> None:
    assert eager[-1] < eager[0] - 1.0, eager  # it trained: a lever's error would show in the trajectory
    torch.testing.assert_close(torch.tensor(lever), torch.tensor(eager), rtol=rtol, atol=0.0)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_adamw_foreach_and_fused_train_as_the_per_tensor_loop(impl: str) -> None:
    plain, _ = train("--optimizer", "adamw", "--optimizer-impl", "plain", lr="0.003")
    other, _ = train("--optimizer", "adamw", "--optimizer-impl", impl, lr="0.003")
    assert_same_training(plain, other, FP32_RTOL)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Chunks of ROWS rows, and the rows of every log-softmax the chunked loss took (never more than a chunk)."""
    monkeypatch.setattr(levers, "CE_CHUNK_ROWS", ROWS)
    seen: list[int] = []
    real = F.log_softmax

    def counting(x: torch.Tensor, dim: int) -> torch.Tensor:
        seen.append(x.size(0))
        return real(x, dim=dim)
    monkeypatch.setattr(levers, "F", type("F", (), {"log_softmax": staticmethod(counting)}))
    return seen


@pytest.mark.parametrize(("precision_name", "rtol"), [("fp32", FP32_RTOL), ("amp-bf16", BF16_RTOL)])
def test_the_chunked_loss_trains_as_the_whole_logits_do(precision_name: str, rtol: float,
                                                        small_chunks: list[int]) -> None:
    plain, _ = train(precision_name=precision_name)
    assert small_chunks == []
    chunked, model = train("--loss-impl", "chunked", precision_name=precision_name)
    assert chunked[0] == pytest.approx(plain[0], rel=1e-6, abs=0.0)  # the same forward, chunk by chunk
    assert_same_training(plain, chunked, rtol)
    assert small_chunks[:10] == [ROWS] * 9 + [64 - 9 * ROWS]  # no logits tensor of more than a chunk's rows
    assert model.hidden_only


def test_the_chunked_loss_and_its_gradients_equal_cross_entropy() -> None:
    """Rows that do not divide into the chunks, a scaled loss (the backward multiplies by the loss's gradient)."""
    torch.manual_seed(0)
    hidden = torch.randn(10, 8, requires_grad=True)
    weight = torch.randn(20, 8, requires_grad=True)
    targets = torch.randint(0, 20, (10,))
    expected = F.cross_entropy(hidden @ weight.t(), targets)
    want = torch.autograd.grad(expected * 3.0, (hidden, weight))
    for rows in (1, 3, 10, 4096):
        loss = levers.chunked_loss(weight, rows)(hidden, targets)
        got = torch.autograd.grad(loss * 3.0, (hidden, weight))
        torch.testing.assert_close(loss, expected, rtol=FP32_RTOL, atol=0.0)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=FP32_RTOL, atol=1e-7)


def test_checkpointing_trains_as_without_and_recomputes_every_block() -> None:
    eager, _ = train()
    checkpointed, model = train("--checkpoint")
    assert model.checkpoint is not None
    assert_same_training(eager, checkpointed, RECOMPUTE_RTOL)
    calls: list[int] = []
    for block in model.blocks:
        block.register_forward_pre_hook(lambda *_: calls.append(1))  # the recompute may stop early: pre-hooks
    x = torch.randint(0, 256, (1, 8))
    F.cross_entropy(model(x), torch.zeros(8, dtype=torch.long)).backward()
    assert len(calls) == 2 * len(model.blocks)  # forward once, and again in the backward: checkpointing is on


@pytest.mark.parametrize(("precision_name", "rtol"), [("fp32", FP32_RTOL), ("amp-bf16", BF16_RTOL)])
def test_the_flash_backend_trains_as_the_math_one(precision_name: str, rtol: float) -> None:
    """SDPA's flash kernel has a CPU implementation (torch 2.13): forced alone (no fallback: a shape it refused would
    raise), it trains as the math backend, the reference. FP32: the same sums tiled, 3.2e-7 measured; BF16 autocast:
    flash accumulates its tiles in FP32 where math rounds QK^T to BF16 first, 3.6e-3 measured after 20 steps, held
    to BF16's 1e-2 as the chunked loss is."""
    reference, _ = train("--attention", "math", precision_name=precision_name)
    flash, model = train("--attention", "flash", precision_name=precision_name)
    assert model.kernel is not None  # the forced backend's context, entered at every forward
    assert_same_training(reference, flash, rtol)


@pytest.mark.parametrize("backend", ["mem_efficient", "cudnn"])
def test_the_backends_a_cpu_lacks_are_refused_with_their_sentence(backend: str) -> None:
    """The memory-efficient and cuDNN kernels are CUDA's: bench's probe refuses them before any training, never
    falling back to another backend (tests/bench/test_levers_gpu.py trains them against math)."""
    with pytest.raises(Unsupported, match=rf"^the {backend} backend of scaled_dot_product_attention cannot run "
                       r"here \(cpu, float32, head size 32\): RuntimeError: No viable backend"):
        train("--attention", backend)


@pytest.mark.slow
def test_compile_trains_as_eager() -> None:
    """inductor on this CPU: 82 s for the tiny GPT with a cold cache on the 2-vCPU VM, 6.5 s warm (its FX graph and
    C++ caches); on a GPU: tests/bench/test_levers_gpu.py."""
    eager, _ = train(steps=10)
    compiled, _ = train("--compile", steps=10)
    assert_same_training(eager, compiled, FP32_RTOL)


@pytest.mark.slow
def test_max_autotune_trains_as_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """--compile --compile-mode max-autotune: inductor choosing among its kernels by timing them (on the CPU its C++
    GEMM templates against ATen's), 78 s cold on the 2-vCPU VM, 6.9 s warm: marked slow as the default mode is.
    The losses 1.1e-7 (relative) from eager's, held to FP32's 1e-5."""
    modes: list[str | None] = []
    real = torch.compile

    def spy(model: torch.nn.Module, **kwargs: str) -> torch.nn.Module:
        modes.append(kwargs.get("mode"))
        return real(model, **kwargs)
    monkeypatch.setattr(torch, "compile", spy)
    eager, _ = train(steps=10)
    compiled, _ = train("--compile", "--compile-mode", "max-autotune", steps=10)
    assert modes == ["max-autotune"]  # the mode asked for reached torch.compile
    assert_same_training(eager, compiled, FP32_RTOL)


def test_a_lever_that_changed_the_loss_would_be_seen() -> None:
    """The comparison can fail: one step more of training, or a learning rate 1% higher, is far outside it."""
    eager, _ = train()
    with pytest.raises(AssertionError):
        assert_same_training(eager, train(lr="0.101")[0], FP32_RTOL)


def test_the_chunked_loss_keeps_fp16_gradients_from_underflowing_before_the_loss_scale() -> None:
    """FP16 (the manual recipe's model, or autocast's products): the logits' gradient divided by 4,096 rows is below
    FP16's normal range; the plain loss receives the loss scale first, so must the chunked one."""
    torch.manual_seed(0)
    hidden = torch.randn(4096, 16).half().requires_grad_()
    weight = (torch.randn(512, 16) * 0.1).half().requires_grad_()
    targets = torch.randint(0, 512, (4096,))
    plain = F.cross_entropy((hidden @ weight.t()).float(), targets)
    want = torch.autograd.grad(plain * 1024.0, (hidden, weight))
    chunked = levers.chunked_loss(weight, 1000)(hidden, targets)
    got = torch.autograd.grad(chunked * 1024.0, (hidden, weight))
    torch.testing.assert_close(chunked, plain, rtol=1e-3, atol=0.0)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == torch.float16
        torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=1e-3)
