"""How often the site's change-point search (runner/publish/changes.py) marks a change in a history that has
none, and how often it finds a real step, on real noise.

Every run's mean in a simulated history is the mean of `--repeats` repeats resampled from real CPU repeats (each
cell's ok throughputs divided by its median, pooled from the committed reports' repeats.csv), times a run
effect (runs of one machine differ by more than their repeats: a reboot, a neighbour; Gaussian, `--run-cv`).
A/A: no change anywhere; the false-alarm rate is the share of histories with at least one change found.
A/B: a step of 5% or 10% at the middle; power is the share where a change is found within one run of it.

    .venv/bin/python benchmarks/changepoint_check.py [--sims 1000] [--seed 0]
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import runner.analysis as an  # noqa: E402
from runner.publish.changes import changes  # noqa: E402

CSVS = sorted((ROOT / "reports").glob("*/repeats.csv"))


def noise_pool() -> np.ndarray:
    """Relative throughputs (value / its cell's median) of every cell with at least three ok repeats."""
    cells: dict[tuple[str, str], list[float]] = {}
    for path in CSVS:
        with path.open() as f:
            for row in csv.DictReader(f):
                if row.get("status") == "ok" and row.get("throughput"):
                    cells.setdefault((path.parent.name, row["cell_key"]), []).append(float(row["throughput"]))
    values = [np.asarray(v) / np.median(v) for v in cells.values() if len(v) >= 3]
    return np.concatenate(values)


def history(rng: np.random.Generator, pool: np.ndarray, runs: int, repeats: int, step: float,
            run_cv: float) -> np.ndarray:
    run_effect = 1 + rng.normal(0, run_cv, runs)
    means = np.array([rng.choice(pool, repeats).mean() for _ in range(runs)]) * run_effect
    means[runs // 2:] *= 1 - step
    return means * 1000.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sims", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-cv", type=float, default=0.02, help="the spread of the run effect (0.02 = 2%%)")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    pool = noise_pool()
    metric = an.get_metric("throughput")
    print(f"noise: {len(pool)} relative repeats from {len(CSVS)} reports (CV {pool.std(ddof=1) / pool.mean():.1%}); "
          f"{args.sims} histories a row, {args.repeats} repeats a run, run effect CV {args.run_cv:.0%}; load average {os.getloadavg()[0]:.1f}")
    print("runs | A/A: histories with a false change | 5% step found (within 1 run) | 10% step found")
    for runs in (10, 30, 100):
        false = sum(bool(changes(history(rng, pool, runs, args.repeats, 0.0, args.run_cv), metric)) for _ in range(args.sims))
        found = []
        for step in (0.05, 0.10):
            hits = 0
            for _ in range(args.sims):
                hits += any(abs(c.index - runs // 2) <= 1
                            for c in changes(history(rng, pool, runs, args.repeats, step, args.run_cv), metric))
            found.append(hits / args.sims)
        print(f"{runs:4d} | {false / args.sims:6.1%} | {found[0]:6.1%} | {found[1]:6.1%}")


if __name__ == "__main__":
    main()
