"""The calibration probe: how long one training iteration of each cell takes, so that the kit can size each
cell's measured window (iterations) to at least the seconds asked for.

It runs in the benchmark's interpreter, one process for many cells (one torch import and CUDA start, not
one per cell), and builds each cell exactly as bench does (runner/bench: arguments, precision recipe, data,
model, training step), warms it up, then times iterations between two device synchronisations:

    python -m runner.kit.calibrate CELLS.json OUT.jsonl

CELLS.json is a list of {"id": ..., "args": [bench arguments]}; one JSON line per cell is appended to
OUT.jsonl as soon as it is known: {"id", "status" (ok|unsupported|oom|failed), "t_iter" (seconds per
iteration), "reason", "device_name", "probe_s"}. Unsupported and out-of-memory cells are results here too.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from typing import Any

WARMUP_ITERS = 3
MIN_TIMED_ITERS = 3
MIN_TIMED_S = 0.25


def probe(argv: list[str]) -> dict[str, Any]:
    """Time one cell: seconds per training iteration after a short warm-up."""
    from runner.bench import compat, data, models, precision, timing, training
    from runner.bench import main as bench_main
    from runner.bench.args import parse_args
    from runner.bench.compat import first_line
    from runner.bench.errors import BadArgs, Unsupported, is_dtype_gap, is_oom

    torch = compat.torch
    started = time.perf_counter()
    out: dict[str, Any] = {"status": "ok", "t_iter": None, "reason": None, "device_name": None}
    state: dict[str, Any] = {}
    try:
        if torch is None:
            raise Unsupported(f"torch is not importable here: {compat.TORCH_IMPORT_ERROR}")
        args = parse_args(argv)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        device = bench_main.resolve_device(args.device, 0)
        if device.type == "cuda":
            out["device_name"] = torch.cuda.get_device_name(device)
        from runner.bench import preflight
        preflight.check(preflight.device_features(device))
        bench_main.seed_everything(args.seed)
        models.check_model_available(args.model)
        plan = precision.plan_precision(args, device)
        precision.apply_backend_flags(plan, args, device)
        source, _, channels, hw, classes, _ = data.load_data(args, device, plan, models.model_defaults(args.model),
                                                            (0, 1, 0))
        state["source"] = source
        model = models.build_model(args.model, args, channels, hw, classes)
        model.train()
        model, _, steps, _ = training.setup_training(model, plan, args, device, (0, 1, 0))
        state["model"] = model
        timing.run_warmup(WARMUP_ITERS, source, steps)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        forward, backward, update = steps
        sync()
        t0 = time.perf_counter()
        n = 0
        while n < MIN_TIMED_ITERS or time.perf_counter() - t0 < MIN_TIMED_S:
            x, y = source.next()
            backward(forward(x, y))
            update()
            n += 1
            if n % MIN_TIMED_ITERS == 0:
                sync()
        sync()
        out["t_iter"] = (time.perf_counter() - t0) / n
    except (Unsupported, BadArgs) as e:
        out.update(status="unsupported" if isinstance(e, Unsupported) else "failed", reason=str(e))
    except Exception as e:  # the cell's own repeats will say it again, with their status
        if torch is not None and is_oom(e):
            out.update(status="oom", reason=first_line(e))
        elif torch is not None and is_dtype_gap(e):
            out.update(status="unsupported", reason=first_line(e))
        else:
            out.update(status="failed", reason=first_line(e))
    finally:
        state.clear()
        gc.collect()
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    out["probe_s"] = time.perf_counter() - started
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        sys.stderr.write("usage: python -m runner.kit.calibrate CELLS.json OUT.jsonl\n")
        return 2
    with open(args[0]) as f:
        cells = json.load(f)
    with open(args[1], "a") as out:
        for cell in cells:
            rec = probe(list(cell["args"]))
            rec["id"] = cell["id"]
            out.write(json.dumps(rec) + "\n")
            out.flush()
            speed = f"{rec['t_iter']:.4f} s/iteration" if rec["t_iter"] else rec["reason"]
            sys.stderr.write(f"[calibrate] {cell['id']}: {rec['status']} {speed}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
