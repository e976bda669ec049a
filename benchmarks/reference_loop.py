"""The reference: a plain hand-written mixed-precision training loop, the way the Tensor-Core
write-ups train (autocast + GradScaler, SGD momentum, a fixed batch on the device).

The benchmark must be at least as fast as this on the same model, batch and data; this file is what
`benchmarks/bench_vs_reference.py` holds it against. It builds the model with the benchmark's own
`build_model` (runner/bench/models.py) (torchvision's for resnet50 and friends), so both train the same network, and
prints one JSON line: img/s over the measured window, after warm-up, with the device
synchronised around it.

    python benchmarks/reference_loop.py --model resnet50 --batch-size 256 --dtype float16 \
        --channels-last --cudnn-benchmark --device cuda
    python benchmarks/reference_loop.py --model mnist_cnn --batch-size 64 --dtype bfloat16 --device cpu
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import sys
import time
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]


def load_bench() -> tuple[ModuleType, ModuleType]:
    """The benchmark's argument parser and models, from this checkout (matrix need not be installed)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return importlib.import_module("runner.bench.args"), importlib.import_module("runner.bench.models")


def make_sgd(params: list[nn.Parameter], want: str, device: torch.device,
             dynamic_scaler: bool) -> tuple[torch.optim.Optimizer, str, str]:
    """SGD momentum 0.9 as bench makes it (runner/bench/training.py's optimizer_choices, the one place that decides):
    (optimizer, implementation, why). auto is bench's auto for the same device and loss scaler: foreach, not fused,
    under FP16's GradScaler."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    training = importlib.import_module("runner.bench.training")
    accepted = set(inspect.signature(torch.optim.SGD.__init__).parameters)
    choices, why = training.optimizer_choices(want, device.type, accepted, True, dynamic_scaler)
    for impl, kwargs in choices:
        try:
            return torch.optim.SGD(params, lr=0.01, momentum=0.9, **kwargs), impl, why
        except (RuntimeError, ValueError, TypeError):
            if want != "auto":
                raise
    raise RuntimeError(f"no SGD implementation of {[c[0] for c in choices]} constructs here")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), default="float16",
                   help="autocast dtype (float32: no autocast)")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--pool", type=int, default=4, help="random batches cycled (bench's --synthetic-batches)")
    p.add_argument("--optimizer", choices=("auto", "fused", "foreach", "plain"), default="auto",
                   help="SGD's implementation (auto: bench's choice for the same device and precision; "
                   "bench_vs_reference.py passes the one the benchmark used)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
    bench_args, bench_models = load_bench()
    model_args = bench_args.parse_args(["--model", args.model, "--precision", "fp32", "--batch-size",
                                   str(args.batch_size), "--dataset", "synthetic"])
    channels, side, classes = bench_models.model_defaults(args.model)
    size = (side, side)
    model = bench_models.build_model(args.model, model_args, channels, size, classes).to(device)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    # The same data as bench's `dataset: synthetic`: a pool of random batches made once on the device, cycled
    # (one fixed batch stays in the CPU's caches where bench's pool does not: not like with like).
    pool = [(torch.randn(args.batch_size, channels, *size, device=device).to(memory_format=memory_format),
             torch.randint(0, classes, (args.batch_size,), device=device)) for _ in range(args.pool)]

    dtype = getattr(torch, args.dtype)
    use_autocast = dtype is not torch.float32
    scaler = torch.amp.GradScaler(device.type, enabled=cuda and dtype is torch.float16)
    criterion = nn.CrossEntropyLoss()
    optimizer, impl, why = make_sgd(list(model.parameters()), args.optimizer, device, scaler.is_enabled())

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    model.train()
    loss = torch.zeros((), device=device)
    start = 0.0
    for i in range(args.warmup + args.iterations):
        if i == args.warmup:
            sync()
            start = time.perf_counter()
        x, y = pool[i % len(pool)]
        with torch.autocast(device.type, dtype=dtype, enabled=use_autocast):
            loss = criterion(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    sync()
    window = time.perf_counter() - start
    final = float(loss.item())
    print(json.dumps({
        "model": args.model, "batch_size": args.batch_size, "dtype": args.dtype, "device": str(device),
        "device_name": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__, "iterations": args.iterations, "warmup": args.warmup,
        "channels_last": args.channels_last, "cudnn_benchmark": args.cudnn_benchmark, "optimizer": impl,
        "optimizer_why": why,
        "window_s": window, "throughput": args.batch_size * args.iterations / window if window > 0 else None,
        "loss_end": final if math.isfinite(final) else None,
        "peak_mem_allocated": torch.cuda.max_memory_allocated(device) if cuda else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
