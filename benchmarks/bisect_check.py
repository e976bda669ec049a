"""How often `matrix bisect` names a culprit that is not there, and how often it finds the one that is, on real noise.

Each simulated bisect runs the real search (runner/analysis/bisect_search.py) over N ordered environments whose
repeats are drawn from recorded throughput repeats (each cell's repeats over their mean, pooled, as
benchmarks/stats_check.py does), with a level per environment:

- noise only: every environment at the same level. A `found` answer is a false culprit, `spread` a false change;
- single step: one adjacent pair changes the level by the step; `found` on that pair is right, on another pair
  a wrong culprit;
- two steps: two pairs change it (each by the step, in the same direction); `spread` is right, `found` names one
  of them as if it were the only one (a false single culprit).

It prints, per noise, threshold and scenario: the share of each answer, wrong culprits, the environments and
repeats measured against a full sweep (N x the first level), with the search's correction of the significance
level over the repeat levels and, for comparison, without it (`p < 0.05` at every look).

    .venv/bin/python benchmarks/bisect_check.py                     # the committed reports' repeats, 500 sims
    .venv/bin/python benchmarks/bisect_check.py --sims 2000 --envs 8 --envs 16
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.analysis import bisect_pair, significance  # noqa: E402
from runner.analysis import bisect_search as search  # noqa: E402

QUIET = [ROOT / "reports/quickstart-cpu/repeats.csv", ROOT / "reports/container-vs-local-cpu/repeats.csv"]
NOISY = [ROOT / "reports/eras-cpu/repeats.csv"]


def pooled_noise(paths: list[Path], min_repeats: int = 3) -> np.ndarray:
    """Every ok cell's repeats over their mean, widened by sqrt(n/(n-1)) (a deviation from a mean of n values is
    that much narrower than the noise), in one pool."""
    cells: dict[str, list[float]] = {}
    for path in paths:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row["status"] == "ok" and row["throughput"]:
                    key = "|".join(row[k] for k in ("environment", "model", "precision", "batch_size", "options"))
                    cells.setdefault(f"{path}|{key}", []).append(float(row["throughput"]))
    devs = [(np.array(v) / np.mean(v) - 1) * math.sqrt(len(v) / (len(v) - 1))
            for v in cells.values() if len(v) >= min_repeats]
    return 1 + np.concatenate(devs)


def simulate(levels: list[float], noise: np.ndarray, settings: search.Settings, rng: np.random.Generator,
             most: int) -> search.SearchAnswer:
    data = [list(level * rng.choice(noise, most)) for level in levels]
    return search.bisect(len(levels), search.replay(data), settings)


def scenario_levels(kind: str, n: int, step: float, rng: np.random.Generator) -> tuple[list[float], set[int]]:
    """The level of each environment and the pairs (by left index) where it truly changes."""
    if kind == "noise only":
        return [1.0] * n, set()
    if kind == "single step":
        at = int(rng.integers(n - 1))
        return [1.0 if i <= at else 1.0 + step for i in range(n)], {at}
    first, second = sorted(rng.choice(n - 1, 2, replace=False).tolist())
    return [1.0 + step * ((i > first) + (i > second)) for i in range(n)], {first, second}


def run(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    noises = {"quiet (reports/quickstart-cpu, container-vs-local-cpu)": pooled_noise(QUIET),
              "noisy (reports/eras-cpu)": pooled_noise(NOISY)}
    levels = bisect_pair.levels(3, 10)
    print(f"{platform.node()} {platform.processor() or platform.machine()}, load {os.getloadavg()[0]:.1f}, "
          f"{args.sims} bisects per row, seed {args.seed}, repeat levels {levels}")
    for label, noise in noises.items():
        print(f"\nnoise {label}: {noise.size} repeats, sd {noise.std():.1%}")
        print("| envs | threshold | scenario | step | p per look | found (right) | found (wrong pair) | spread | "
              "no change | undecided | envs measured | repeats (full sweep at 3) |")
        print("| ---: | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for n in args.envs:
            for threshold in args.thresholds:
                for kind, step in (("noise only", 0.0), ("single step", args.step), ("single step", 2 * threshold),
                                   ("two steps", args.step)):
                    for corrected in (True, False):
                        alpha = significance.ALPHA * (1 if corrected else len(levels))
                        settings = search.Settings(threshold=threshold, levels=levels, alpha=alpha)
                        outcomes: Counter[str] = Counter()
                        envs = repeats = 0
                        for _ in range(args.sims):
                            lv, true = scenario_levels(kind, n, step, rng)
                            answer = simulate(lv, noise, settings, rng, levels[-1])
                            outcome = answer.outcome
                            if outcome == search.FOUND:
                                right = answer.culprit is not None and answer.culprit.a in true and len(true) == 1
                                outcome = "found right" if right else "found wrong"
                            outcomes[outcome] += 1
                            envs += len(answer.repeats)
                            repeats += sum(answer.repeats.values())
                        share = {k: v / args.sims for k, v in outcomes.items()}
                        print(f"| {n} | {threshold:.0%} | {kind} | {step if kind != 'noise only' else 0:.0%} | "
                              f"{'0.05/' + str(len(levels)) if corrected else '0.05'} | "
                              f"{share.get('found right', 0):.1%} | {share.get('found wrong', 0):.1%} | "
                              f"{share.get(search.SPREAD, 0):.1%} | {share.get(search.NO_CHANGE, 0):.1%} | "
                              f"{share.get(search.UNDECIDED, 0):.1%} | {envs / args.sims:.1f} of {n} | "
                              f"{repeats / args.sims:.1f} ({3 * n}) |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sims", type=int, default=500)
    parser.add_argument("--envs", type=int, action="append", help="environments in the list (default 8)")
    parser.add_argument("--threshold", dest="thresholds", type=float, action="append",
                        help="as a fraction (default 0.05 and 0.10)")
    parser.add_argument("--step", type=float, default=0.5, help="a true step's size (default 0.5 = +50%%)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.envs = args.envs or [8]
    args.thresholds = args.thresholds or [0.05, 0.10]
    started = time.time()
    run(args)
    print(f"\n{time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
