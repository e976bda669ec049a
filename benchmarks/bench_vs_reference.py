"""The benchmark against the plain hand-written loop (benchmarks/reference_loop.py) on the same model,
batch, data and precision: is the benchmark at least as fast as the loop a user would write?

Each repeat is a fresh process for each side, the two alternating so drift hits both alike (bench first in even
repeats, the loop in odd ones). Prints img/s mean ± std and CV per side, then the ratio bench/reference from the
pairs with its interval and the verdict against --tolerance (benchmarks/paired.py): exit 0 within it, 1 outside,
5 not established, 3 a side did not measure, 70 the script itself crashed (never 1).

On the GPU (the issue's case; the reference is AMP FP16 with a GradScaler):
    python benchmarks/bench_vs_reference.py --model resnet50 --batch-size 256 --precision amp \
        --device cuda --channels-last --cudnn-benchmark --iterations 100 --warmup 20 --repeats 5
On a CPU (bf16 autocast; no loss scaling there):
    .venv/bin/python benchmarks/bench_vs_reference.py --model mnist_cnn --batch-size 64 \
        --precision amp-bf16 --device cpu --threads 2 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from pathlib import Path

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

BENCH = artifact.path()  # the zipapp every backend runs
REFERENCE = ROOT / "benchmarks" / "reference_loop.py"
DTYPES = {"amp": "float16", "amp-bf16": "bfloat16", "fp32": "float32"}



def same_optimizer(result: dict[str, object]) -> str:
    """The reference loop's --optimizer for the SGD implementation a bench result records
    (precision.optimizer, e.g. "sgd-momentum-0.9-fused")."""
    record = result.get("precision") or {}
    impl = str(record.get("optimizer") or "") if isinstance(record, dict) else ""
    return {"fused": "fused", "foreach": "foreach"}.get(impl.rsplit("-", 1)[-1], "plain")



def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--precision", choices=sorted(DTYPES), default="amp")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--iterations", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--tolerance", type=tolerance_arg, default=0.03, help="the largest |bench/reference - 1| that passes")
    p.add_argument("--json", type=Path, default=None, help="also write every repeat here")
    args = p.parse_args()
    common = ["--model", args.model, "--batch-size", str(args.batch_size), "--device", args.device,
              "--iterations", str(args.iterations), "--warmup", str(args.warmup)]
    flags = (["--channels-last"] if args.channels_last else []) + (["--cudnn-benchmark"] if args.cudnn_benchmark
                                                                   else [])
    threads = ["--threads", str(args.threads)] if args.threads else []
    bench_argv = [str(BENCH), *common, "--precision", args.precision, "--dataset", "synthetic", *flags, *threads]
    ref_argv = [str(REFERENCE), *common, "--dtype", DTYPES[args.precision], *flags, *threads]
    runs: dict[str, list[dict[str, object]]] = {"bench": [], "reference": []}
    optimizer = ""
    for r in range(args.repeats):
        for side in (("bench", "reference") if r % 2 == 0 else ("reference", "bench")):  # neither always first
            if side == "reference":
                runs["reference"].append(run_json(ref_argv))
                continue
            b = run_json(bench_argv, "MATRIX_RESULT ")
            if b.get("status") != "ok":
                print(f"bench: {b.get('status')}: {b.get('reason')}", file=sys.stderr)
                raise SystemExit(NOT_MEASURED)
            runs["bench"].append(b["metrics"])  # type: ignore[arg-type]
            if not optimizer:  # the loop steps with the optimizer implementation bench used: like with like
                optimizer = same_optimizer(b)  # (the first repeat runs bench first, so this is known in time)
                ref_argv += ["--optimizer", optimizer]
        print(f"repeat {r + 1}/{args.repeats}: bench {runs['bench'][-1]['throughput']:.1f} img/s, "
              f"reference {runs['reference'][-1]['throughput']:.1f} img/s", file=sys.stderr, flush=True)
    print(f"{args.model} {args.precision} batch {args.batch_size} on {args.device}"
          f"{' channels_last' if args.channels_last else ''}{' cudnn.benchmark' if args.cudnn_benchmark else ''}, "
          f"{args.warmup} warm-up + {args.iterations} measured iterations, {args.repeats} repeats per side, "
          f"SGD {optimizer} on both sides")
    ref = runs["reference"][-1]
    print(f"host: {platform.node()}, device {ref['device_name']}, torch {ref['torch']}, "
          f"Python {platform.python_version()}")
    means = {}
    for side, rows in runs.items():
        mean, std, cv = stats([float(m["throughput"]) for m in rows])  # type: ignore[arg-type]
        means[side] = mean
        print(f"{side:>9}: {mean:10.1f} ± {std:7.1f} img/s  (CV {cv:.2%})")
    print(f"ratio of the means: {means['bench'] / means['reference']:.3f}")
    pair = paired_ratio([float(m["throughput"]) for m in runs["bench"]],  # type: ignore[arg-type]
                        [float(m["throughput"]) for m in runs["reference"]])  # type: ignore[arg-type]
    lines, code = summary_lines(pair, args.tolerance, "img/s")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "optimizer": optimizer,
                                         "paired": {k: (None if isinstance(v, float) and math.isnan(v) else v)
                                                    for k, v in vars(pair).items()},
                                         "verdict": lines[-1], "runs": runs}, indent=1))
    return code


if __name__ == "__main__":
    sys.exit(guarded(main))
