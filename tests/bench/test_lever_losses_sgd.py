"""SGD's foreach and fused implementations train as its per-tensor loop: SGD with momentum 0.9 (bench's recipe for
every model), the same seed, the same two batches in turn, 20 steps, wired by bench itself, the loss after each step
compared (tests/bench/test_lever_losses.py does the same for AdamW and the transformer's levers).

torch 2.13 has fused SGD on the CPU (torch.optim.SGD(fused=True) runs its own CPU kernel), so both levers are tested
here; bench's auto never picks fused SGD under a dynamic loss scaler (optim.FUSED_UNDER_SCALER), which only a GPU
has: tests/bench/test_levers_gpu.py. Tolerance: FP32's 1e-5 relative (docs/internals.md, "Each lever's loss against
eager"). foreach and fused update the same tensors with the same arithmetic in other kernels; measured on this CPU
both give the loop's losses bit for bit on all three models (fused's WRN weights differ by at most 1.5e-8, its batch
norms' statistics by 2.6e-6 relative on values near zero: its kernel rounds differently), where a learning rate 1%
higher moves the loss by 8.6e-3 (GPT), 2.5e-2 (WRN) and 3.4e-2 (mnist_cnn) relative. The models: the tiny GPT (as
the AdamW test), mnist_cnn (convolutions, dropout: the same draws in both runs, the optimizer takes no random
numbers) and WRN-10-1 (convolutions with batch norm, whose weights SGD updates and whose running statistics follow
the weights)."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch

from runner.bench import args as bench_args
from runner.bench import models, precision, training
from tests.bench.test_lever_losses import FP32_RTOL, STEPS, assert_same_training, run_steps, train

# model -> (its input (channels, height, width), the learning rate its loss falls by more than 1.0 in 20 steps
# without reaching near zero, where a relative comparison would amplify rounding).
IMAGE_MODELS = {"mnist_cnn": ((1, 28, 28), "0.01"), "wrn": ((3, 16, 16), "0.03")}


class Trained(NamedTuple):
    losses: list[float]     # every step's loss
    model: torch.nn.Module
    record: dict[str, Any]  # the precision record's entries setup_training made (the optimizer that ran...)
    watch: Any              # health.ScalerWatch where a dynamic loss scaler ran, else None


def train_image(model_name: str, *extra: str, lr: str | None = None, steps: int = STEPS, device: str = "cpu",
                precision_name: str = "fp32", init_scale: float | None = None) -> Trained:
    """An image model trained on two fixed batches of four images in turn, wired as bench wires it (its parser,
    precision plan and backend flags, build_model, setup_training). `init_scale`: the dynamic loss scaler's first
    scale (GradScaler's own is 2**16; bench has no option for it)."""
    torch.set_num_threads(1)
    shape, default_lr = IMAGE_MODELS[model_name]
    args = bench_args.parse_args(["--model", model_name, "--precision", precision_name, "--batch-size", "4",
                                  "--dataset", "synthetic", "--device", device, "--lr", lr or default_lr,
                                  "--wrn-depth", "10", "--wrn-width", "1", *extra])
    dev = torch.device(device)
    plan = precision.plan_precision(args, dev)
    precision.apply_backend_flags(plan, args, dev)  # on a GPU: TF32 off for fp32
    torch.manual_seed(0)
    model = models.build_model(model_name, args, shape[0], shape[1:], 10)
    _, _, (forward, backward, update), record, watch = training.setup_training(model, plan, args, dev, (0, 1, 0))
    if init_scale is not None:
        watch.scaler._init_scale = init_scale  # read at the first scale(): lazily made on the loss's device
    g = torch.Generator().manual_seed(1)
    pool = [(torch.randn(4, *shape, generator=g).to(dev), torch.randint(0, 10, (4,), generator=g).to(dev))
            for _ in range(2)]
    losses = run_steps(pool, steps, forward, backward, update)
    return Trained(losses, model, record, watch)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
@pytest.mark.parametrize("model_name", sorted(IMAGE_MODELS))
def test_sgd_foreach_and_fused_train_image_models_as_the_per_tensor_loop(model_name: str, impl: str) -> None:
    plain = train_image(model_name, "--optimizer-impl", "plain")
    other = train_image(model_name, "--optimizer-impl", impl)
    assert plain.record["optimizer"] == "sgd-momentum-0.9-plain"
    assert other.record["optimizer"] == "sgd-momentum-0.9-" + impl  # the lever asked for is the one that ran
    assert_same_training(plain.losses, other.losses, FP32_RTOL)


@pytest.mark.parametrize("impl", ["foreach", "fused"])
def test_sgd_foreach_and_fused_train_the_gpt_as_the_per_tensor_loop(impl: str) -> None:
    plain, _ = train("--optimizer", "sgd", "--optimizer-impl", "plain")
    other, _ = train("--optimizer", "sgd", "--optimizer-impl", impl)
    assert_same_training(plain, other, FP32_RTOL)


def test_the_batch_norm_statistics_follow_the_same_weights() -> None:
    """WRN's running means and variances after fused SGD's training: those of the per-tensor loop, within FP32's
    rounding (they average activations of weights that differ by a rounding or two: 2.6e-6 relative measured, on
    values near zero, hence 1e-6 absolute beside 1e-5 relative)."""
    buffers = dict(train_image("wrn", "--optimizer-impl", "plain").model.named_buffers())
    assert any(name.endswith("running_var") for name in buffers)
    for name, value in train_image("wrn", "--optimizer-impl", "fused").model.named_buffers():
        torch.testing.assert_close(value, buffers[name], rtol=FP32_RTOL, atol=1e-6)


def test_an_sgd_that_changed_the_loss_would_be_seen() -> None:
    """The comparison can fail on the image models too: a learning rate 1% higher is far outside it."""
    for model_name, (_, lr) in sorted(IMAGE_MODELS.items()):
        eager = train_image(model_name, "--optimizer-impl", "plain").losses
        higher = train_image(model_name, "--optimizer-impl", "plain", lr=str(float(lr) * 1.01)).losses
        with pytest.raises(AssertionError):
            assert_same_training(eager, higher, FP32_RTOL)
