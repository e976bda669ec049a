"""How long `matrix report` takes on a big store: 10,000 synthetic repeats, every format, plots included.

    .venv/bin/python benchmarks/report_gen.py [--repeats 10000] [--rounds 3] [--warm] [--keep DIR]

Fills a temporary store with realistic rows (5 environments, 3 models, 4 precisions, 5 batch sizes,
1/2/4 GPUs for two environments, 50 iteration times per repeat, a sprinkle of oom/failed/timeout), then
times load + analysis + rendering of md, html, csv and json. Target: under 3 s on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.domain.cells import stable_hash  # noqa: E402
from runner.store import SCHEMA, Store  # noqa: E402

ENVS = {
    "ngc-18.07": ("docker", ["container"], "9.2.148", "0.4.1", "410.48"),
    "ngc-24.10": ("docker", ["container"], "12.6.77", "2.5.0a0", "560.35.03"),
    "cluster-pt041": ("slurm", ["slurm", "bare-metal"], "9.0.176", "0.4.1", "396.26"),
    "cluster-pt113": ("slurm", ["slurm", "bare-metal"], "11.7", "1.13.1", "525.85.12"),
    "local-cpu": ("local", ["local"], "", "2.13.0", ""),
}
MODELS = {"resnet50": 380.0, "cifar_vgg16": 2200.0, "wrn": 900.0}
PRECISIONS = {"fp32": 1.0, "tf32": 1.6, "fp16": 2.2, "amp": 2.05}
BATCHES = (32, 64, 128, 256, 512)
ITERATIONS = 50


def synthetic_rows(n: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """`n` result rows as Store.add would write them, spread evenly over the cells."""
    rng = random.Random(seed)
    cells = []
    for env, model, prec, bs in itertools.product(ENVS, MODELS, PRECISIONS, BATCHES):
        for gpus in ((1, 2, 4) if env in ("ngc-24.10", "cluster-pt113") else (1,)):
            cells.append((env, model, prec, bs, gpus))
    rows = []
    per_cell = n // len(cells)
    extra = n - per_cell * len(cells)
    t = 1.7e9
    for i, (env, model, prec, bs, gpus) in enumerate(cells):
        backend, tags, cuda, torch, driver = ENVS[env]
        params = {"model": model, "precision": prec, "batch_size": bs, "dataset": "synthetic", "gpus": gpus,
                  "nodes": 1}
        key = stable_hash({"env": env, "params": params})
        base = MODELS[model] * PRECISIONS[prec] * (0.05 if env == "local-cpu" else 1.0) * gpus * 0.92
        capture = {"python": "3.11.9", "torch": torch, "cuda": cuda, "driver": driver,
                   "device": "cpu" if env == "local-cpu" else "cuda",
                   "device_name": None if env == "local-cpu" else "NVIDIA A100-SXM4-80GB",
                   "cpu": "AMD EPYC 7763 64-Core Processor", "hostname": f"{env}-host",
                   "image": f"nvcr.io/nvidia/pytorch:{env[4:]}-py3" if backend == "docker" else None}
        for r in range(per_cell + (1 if i < extra else 0)):
            t += 3.0
            roll = rng.random()
            status = "ok"
            if bs == 512 and prec == "fp32" and env.startswith("ngc-18"):
                status = "oom"
            elif roll < 0.01:
                status = "failed"
            elif roll < 0.015:
                status = "timeout"
            metrics: dict[str, Any] = {}
            if status == "ok":
                level = base * (1 + rng.gauss(0, 0.02))
                its = [bs * gpus / level * (1 + rng.gauss(0, 0.01)) for _ in range(ITERATIONS)]
                window = sum(its)
                metrics = {"throughput": bs * gpus * ITERATIONS / window, "window_s": window,
                           "images": bs * gpus * ITERATIONS, "iter_times": its, "data_wait_s": window * 0.01,
                           "loss_start": 6.9, "loss_end": 6.9 * 0.6 + rng.gauss(0, 0.02),
                           "accuracy": 0.9 + rng.gauss(0, 0.005) if model == "cifar_vgg16" else None,
                           "peak_mem_allocated": int(bs * 2**24 * (1.0 if prec == "fp32" else 0.6)),
                           "world_size": gpus}
            log = "" if status == "ok" else f"RuntimeError: {status} in repeat {r}\n" * 5
            rows.append((SCHEMA, "20250101-000000-bench0", key, r, env, backend, json.dumps(tags),
                         json.dumps(params), status, None if status == "ok" else status, json.dumps(metrics),
                         json.dumps(capture), None, log, t, t + 2.5))
    return rows


def fill(db: Path, n: int) -> None:
    with Store(db) as store, store.db:
        store.db.execute(
            "INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, argv, host,"
            " status) VALUES ('20250101-000000-bench0', ?, 1.7e9, 1.7e9, 'bench.yaml', 'bench', '[]', 'bench',"
            " 'done')", (SCHEMA,))
        store.db.executemany(
            "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params, status,"
            " reason, metrics, env, raw, log_tail, started_at, finished_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", synthetic_rows(n))


def _children_cpu() -> float:
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="write the reports here instead of a temporary folder")
    ap.add_argument("--warm", action="store_true", help="one untimed round first (templates compiled, fonts cached): "
                    "the rounds then time the work alone, steadier on a shared machine")
    args = ap.parse_args()

    t0 = time.perf_counter()
    from runner import analysis  # noqa: F401  (imports are timed apart from the work)
    from runner.report import charts, render, report_command  # noqa: F401
    imports = time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        t = time.perf_counter()
        fill(db, args.repeats)
        filled = time.perf_counter() - t
        out = args.keep or Path(tmp) / "report"
        times, cpu, helpers = [], [], []
        if args.warm:
            report_command(db, None, ["md", "html", "csv", "json"], out)
        for _ in range(args.rounds):
            t, c, h = time.perf_counter(), time.process_time(), _children_cpu()
            paths = report_command(db, None, ["md", "html", "csv", "json"], out)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            helpers.append(_children_cpu() - h)  # the PNG helper and the forked children, reaped by the report
        per_format = {}
        for f in ("md", "html", "csv", "json"):
            t = time.perf_counter()
            report_command(db, None, [f], Path(tmp) / f"only-{f}")
            per_format[f] = time.perf_counter() - t
        sizes = {p.name: p.stat().st_size for p in paths}

    print(f"store: {args.repeats} repeats filled in {filled:.2f} s; imports {imports:.2f} s")
    print(f"report md+html+csv+json, plots included: wall best {min(times):.2f} s, median "
          f"{statistics.median(times):.2f} s over {len(times)} rounds (target < 3 s); CPU best {min(cpu):.2f} s")
    both = [c + h for c, h in zip(cpu, helpers, strict=True)]
    print(f"CPU of the report's process and its helpers together (PNG helper, forked children): best {min(both):.2f} s, "
          f"median {statistics.median(both):.2f} s; {os.cpu_count()} CPUs x 3 s = {3 * (os.cpu_count() or 1)} s")
    print(f"load average during the run: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    print("one format at a time: " + ", ".join(f"{k} {v:.2f} s" for k, v in per_format.items()))
    print("files: " + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))


if __name__ == "__main__":
    main()
