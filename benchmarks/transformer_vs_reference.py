"""The benchmark's transformer against a plain hand-written training loop of the same model (the GPT of
runner/bench/models.py), batch, sequence length, data and precision, in the same run: each repeat is a fresh
process for each side, the two alternating so drift hits both alike (bench first in even repeats, the reference in
odd ones), the loop stepping with the SGD implementation bench's result records. Prints tok/s mean ± std and CV
per side, then the ratio bench/reference from the pairs with its interval and the verdict (benchmarks/paired.py):
exit 0 within the tolerance (3%), 1 outside it, 5 not established, 3 a side did not measure, 70 a crash (never 1).

On a GPU (GPT-2 124M, BF16):
    python benchmarks/transformer_vs_reference.py --model gpt2_124m --batch-size 16 --seq-len 1024 \
        --precision bf16 --device cuda --iterations 50 --warmup 10 --repeats 5
On a CPU:
    .venv/bin/python benchmarks/transformer_vs_reference.py --model gpt_tiny --batch-size 8 --seq-len 128 \
        --precision fp32 --device cpu --threads 2 --repeats 5
The hand-written loop alone (one JSON line): add --reference-loop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.paired import (  # noqa: E402
    NOT_MEASURED,
    guarded,
    paired_ratio,
    run_json,
    stats,
    summary_lines,
    tolerance_arg,
)
from runner.backends import artifact  # noqa: E402

PRECISIONS = ("fp32", "bf16", "amp-bf16")


def reference_loop(args: argparse.Namespace) -> dict[str, Any]:
    """The loop a user would write: the model, a pool of random token batches on the device, SGD momentum 0.9
    (the implementation --optimizer names: bench's, when the comparison runs it), autocast for amp-bf16 or a BF16 model for bf16, tokens over the synchronised window after warm-up."""
    import torch
    import torch.nn.functional as F

    from runner.bench import models

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    model = models.build_transformer(args.model, sdpa).to(device)
    if args.precision == "bf16":
        model = model.to(torch.bfloat16)
    vocab = models.TRANSFORMER_MODELS[args.model][4]
    pool = []
    for _ in range(4):
        seq = torch.randint(0, vocab, (args.batch_size, args.seq_len + 1), device=device)
        pool.append((seq[:, :-1].contiguous(), seq[:, 1:].reshape(-1)))
    impl = {"plain": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}.get(args.optimizer, {})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, **impl)
    step_model = torch.compile(model) if args.compile else model

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    loss = torch.zeros((), device=device)
    start = 0.0
    for i in range(args.warmup + args.iterations):
        if i == args.warmup:
            sync()
            start = time.perf_counter()
        x, y = pool[i % len(pool)]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "amp-bf16"):
            loss = F.cross_entropy(step_model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync()
    window = time.perf_counter() - start
    final = float(loss.item())
    tokens = args.iterations * args.batch_size * args.seq_len
    return {"model": args.model, "precision": args.precision, "batch_size": args.batch_size, "seq_len": args.seq_len,
            "device": str(device), "device_name": torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or "cpu", "torch": torch.__version__, "iterations": args.iterations,
            "optimizer": args.optimizer, "window_s": window, "tokens": tokens, "throughput": tokens / window if window > 0 else None,
            "loss_end": final if math.isfinite(final) else None}



def same_optimizer(result: dict[str, Any]) -> str:
    """The loop's --optimizer for the SGD implementation a bench result records (precision.optimizer, e.g.
    "sgd-momentum-0.9-fused"; "-default" is SGD as this torch picks it, as the loop's default)."""
    record = result.get("precision") or {}
    impl = str(record.get("optimizer") or "") if isinstance(record, dict) else ""
    return {"fused": "fused", "foreach": "foreach", "plain": "plain"}.get(impl.rsplit("-", 1)[-1], "default")



def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="gpt_tiny")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--precision", choices=PRECISIONS, default="fp32")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cpu")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--iterations", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--optimizer", choices=("default", "plain", "foreach", "fused"), default="default",
                   help="the loop's SGD implementation (the comparison passes bench's)")
    p.add_argument("--tolerance", type=tolerance_arg, default=0.03, help="the largest |bench/reference - 1| that passes")
    p.add_argument("--json", type=Path, default=None, help="also write every repeat here")
    p.add_argument("--reference-loop", action="store_true", help="run the hand-written loop once, print its JSON")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.reference_loop:
        print(json.dumps(reference_loop(args)))
        return 0
    common = ["--model", args.model, "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
              "--device", args.device, "--iterations", str(args.iterations), "--warmup", str(args.warmup),
              "--precision", args.precision, *(["--compile"] if args.compile else []),
              *(["--threads", str(args.threads)] if args.threads else [])]
    bench_argv = [str(artifact.path()), *common, "--dataset", "synthetic", "--workers", "0"]
    ref_argv = [str(Path(__file__).resolve()), *common, "--reference-loop"]
    runs: dict[str, list[dict[str, Any]]] = {"bench": [], "reference": []}
    optimizer = ""
    for r in range(args.repeats):
        for side in (("bench", "reference") if r % 2 == 0 else ("reference", "bench")):  # neither always first
            if side == "reference":
                if not optimizer:  # the loop's SGD is bench's: the first repeat runs bench first, so it is known
                    raise RuntimeError("the loop ran before bench said its optimizer")
                runs["reference"].append(run_json(ref_argv + ["--optimizer", optimizer]))
                continue
            b = run_json(bench_argv, "MATRIX_RESULT ")
            if b.get("status") != "ok":
                print(f"bench: {b.get('status')}: {b.get('reason')}", file=sys.stderr)
                raise SystemExit(NOT_MEASURED)
            optimizer = optimizer or same_optimizer(b)
            m = b["metrics"]
            runs["bench"].append({k: m.get(k) for k in ("throughput", "window_s", "tokens", "loss_end", "mfu",
                                                          "peak_source")})
        print(f"repeat {r + 1}/{args.repeats}: bench {runs['bench'][-1]['throughput']:.1f} tok/s, "
              f"reference {runs['reference'][-1]['throughput']:.1f} tok/s", file=sys.stderr, flush=True)
    ref = runs["reference"][-1]
    print(f"{args.model} {args.precision} batch {args.batch_size} x {args.seq_len} tokens on {args.device}"
          f"{' compiled' if args.compile else ''}, {args.warmup} warm-up + {args.iterations} measured iterations, "
          f"{args.repeats} repeats per side, SGD {optimizer} on both")
    print(f"host: {platform.node()}, device {ref['device_name']}, torch {ref['torch']}, "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.1f}")
    means = {}
    for side, rows in runs.items():
        mean, std, cv = stats([float(m["throughput"]) for m in rows])
        means[side] = mean
        print(f"{side:>9}: {mean:10.1f} ± {std:7.1f} tok/s  (CV {cv:.2%})")
    print(f"ratio of the means: {means['bench'] / means['reference']:.3f}")
    pair = paired_ratio([float(m["throughput"]) for m in runs["bench"]],
                        [float(m["throughput"]) for m in runs["reference"]])
    lines, code = summary_lines(pair, args.tolerance, "tok/s")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "optimizer": optimizer,
                                         "paired": {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                                    for k, v in vars(pair).items()},
                                         "verdict": lines[-1], "runs": runs}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(guarded(main))
