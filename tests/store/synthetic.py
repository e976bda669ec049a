"""Stores with a history: runs of one machine over the same cells, as `matrix run` would have stored them
(the exchange and publish tests, and benchmarks/publish_speed.py and import_speed.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from runner.domain.cells import stable_hash
from runner.store import SCHEMA, Store

MODELS = ("resnet50", "wrn", "mnist_cnn", "vgg16")
PRECISIONS = ("fp32", "amp", "bf16", "fp16")
BATCHES = (32, 64, 128)


def fill_history(db: Path, host: str, cpu: str, runs: int, repeats: int, cells: int = 12, seed: int = 0,
                 step_at: int | None = None, step: float = 1.0, environment: str = "local-cpu",
                 first_run: float = 1.7e9, definitions: dict | None = None, oom_runs: frozenset[int] = frozenset(),
                 iterations: int = 20) -> Path:
    """`runs` runs of `cells` cells x `repeats` repeats; from run `step_at` on, throughput is x `step`;
    `definitions`: the metrics' own definitions ({name: {"how": ..., "unit": ...}}), stored with every repeat;
    `iterations`: the run setting, part of the cell's key as in a matrix (20 keeps the keys these stores always had)."""
    rng = random.Random(seed)
    chosen = [(m, p, b) for m in MODELS for p in PRECISIONS for b in BATCHES][:cells]
    with Store(db) as store, store.db:
        store.db.execute("BEGIN")
        for r in range(runs):
            run_id = f"2026{r:04d}-000000-{rng.getrandbits(24):06x}"
            t0 = first_run + r * 86400.0
            store.db.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, "
                             "argv, host, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                             (run_id, SCHEMA, t0, t0 + 3600, "matrix.yaml", "nightly", "[]", host, "complete"))
            rows = []
            for i, (model, precision, batch) in enumerate(chosen):
                params = {"model": model, "precision": precision, "batch_size": batch, "dataset": "synthetic"}
                key = stable_hash({"env": environment, "params": params,
                                   **({"iterations": iterations} if iterations != 20 else {})})
                base = 100.0 * (1 + i % 5) * (step if step_at is not None and r >= step_at else 1.0)
                for k in range(1, repeats + 1):
                    value = rng.gauss(base, base * 0.02)
                    metrics = {"throughput": value, "window_s": 1.0, "images": value}
                    if definitions:
                        metrics["definitions"] = definitions
                    env = {"hostname": host, "cpu": cpu, "cpu_count": 2, "device": "cpu", "torch": "2.13.0",
                           "python": "3.11.2"}
                    raw = {"params": {"iterations": iterations, "warmup": 5, "seed": 0}}
                    oom = r in oom_runs  # every repeat of this run ran out of memory: no figures
                    rows.append((SCHEMA, run_id, key, k, environment, "local", '["local"]', json.dumps(params),
                                 "oom" if oom else "ok", "CUDA out of memory" if oom else None,
                                 json.dumps({} if oom else metrics), json.dumps(env), json.dumps(raw),
                                 f"log of {model} <{k}>", t0 + i * 10 + k, t0 + i * 10 + k + 1))
            store.db.executemany(
                "INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params, status, "
                "reason, metrics, env, raw, log_tail, started_at, finished_at) VALUES "
                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return db
