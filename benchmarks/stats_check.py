"""How often the regression gate cries wolf, and how often it catches a real slowdown, on real noise.

Reads the ok throughput repeats of every cell in a store (the CPU quickstart, run with many repeats),
divides each cell by its median, and resamples those relative values (outliers included) to simulate
comparisons: A/A (both sides from the same cell) and A/B (side B slowed down by 3%, 5% or 10%). For each
test (Welch, Mann-Whitney, bootstrap) and each repeat setting (a fixed count, and the adaptive rule
`{min: 3, max: 20, target_ci: 1%}` applied to each side as it would run), it prints:

- gate FP: share of A/A comparisons where `--fail-on slower:3%` trips (target: at most 5%);
- test FP: share of A/A comparisons with p < 0.05 in either direction (the test alone);
- power: share of A/B comparisons where the gate trips, and where the test alone is significant.

It also replays the adaptive rule on each cell's repeats in the order they were measured and counts
the repeats it would have run against a fixed 10, and runs a real split-half A/A (first half of each
cell's repeats against the second half).

Decisions (`--part decisions`): the gate's three verdicts as `matrix compare --fail-on slower:3%` gives them
(runner/analysis/change.py: fail beyond 3% and significant, pass only when the 95% interval of the change lies
inside 3%, undecided otherwise), for A/A and for true 3%, 5% and 10% slowdowns, at 3, 5 and 10 repeats a side and
with repeats added until decided (`until: decided`, min 3, max 20: looks at 3, 5, 8, 13 and 20 repeats, one at a
time, each at alpha 0.05 / 5): the share that pass, fail and stay undecided. A pass over a true slowdown of 3% or more
is a false pass; a fail on A/A is a false fail.

Many pairs, one threshold (`--part fdr`): comparisons of `--fdr-pairs` pairs at once (100 by default), all
A/A, or with a share of them truly slower by 5% or 10%, judged as `matrix compare` does (p < 0.05 and a
change of at least 2%) and as the gate `slower:3%` does, with the raw p-values and with the p-values
adjusted by Benjamini-Hochberg over the comparison's pairs (what compare and the gate use): false
positives per comparison, the share of comparisons with any, the false discovery rate and the power.

    make demo   # or any store of CPU repeats; more repeats per cell make a better noise model
    .venv/bin/python benchmarks/stats_check.py --db results/noise.db [--sims 2000] [--seed 0]
    .venv/bin/python benchmarks/stats_check.py --pooled --min-repeats 3 \
        --csv reports/quickstart-cpu/repeats.csv --csv reports/container-vs-local-cpu/repeats.csv
    .venv/bin/python benchmarks/stats_check.py --part fdr --pooled --min-repeats 3 \
        --csv reports/quickstart-cpu/repeats.csv --csv reports/container-vs-local-cpu/repeats.csv
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from runner.analysis import METRICS, MIN_EFFECT, change, significance, welch_from_stats
from runner.analysis.adaptive import Stop, assess, replay
from runner.analysis.bisect_pair import levels
from runner.analysis.verdict import Verdict
from runner.domain.cells import AdaptiveRepeats
from runner.store import Store

ADAPTIVE = AdaptiveRepeats(min=3, max=20, target_ci=0.01)
THRESHOLD = 0.03
SLOWDOWNS = (0.03, 0.05, 0.10)


def load_cells(db: Path, min_repeats: int) -> dict[str, np.ndarray]:
    """Each cell's ok throughput repeats, in the order they were measured (the newest row per repeat)."""
    cells: dict[str, list[tuple[float, float]]] = {}
    labels: dict[str, str] = {}
    with Store(db, create=False) as store:
        for row in store.rows():
            tput = row.metrics.get("throughput")
            if row.status != "ok" or not isinstance(tput, int | float):
                continue
            cells.setdefault(row.cell_key, []).append((float(row.started_at or 0), float(tput)))
            p = row.params
            labels[row.cell_key] = f"{p.get('model')} {p.get('precision')} bs{p.get('batch_size')}"
    out = {}
    for key, vals in cells.items():
        if len(vals) >= min_repeats:
            out[labels[key] + f" [{key[:6]}]"] = np.array([v for _, v in sorted(vals)])
    return out


def load_csv(paths: list[Path], min_repeats: int) -> dict[str, np.ndarray]:
    """The same from the repeats.csv of committed reports (reports/*/repeats.csv)."""
    import csv

    cells: dict[str, list[tuple[float, float]]] = {}
    for path in paths:
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row["status"] != "ok" or not row["throughput"]:
                    continue
                label = f"{row['environment'][:12]} {row['model']} {row['precision']} bs{row['batch_size']}"
                cells.setdefault(label, []).append((float(row["started_at"]), float(row["throughput"])))
    return {k: np.array([v for _, v in sorted(vals)]) for k, vals in cells.items() if len(vals) >= min_repeats}


def noise_profile(cells: dict[str, np.ndarray]) -> None:
    print("Noise in the stored repeats (throughput / the cell's median):")
    print(f"  {'cell':<34} {'n':>3} {'CV':>7} {'min':>7} {'max':>7}")
    for label, x in cells.items():
        r = x / np.median(x)
        print(f"  {label:<34} {x.size:>3} {x.std(ddof=1) / x.mean():>7.2%} {r.min():>7.3f} {r.max():>7.3f}")
    pooled = np.concatenate([x / np.median(x) for x in cells.values()])
    mad = np.median(np.abs(pooled - 1)) * 1.4826
    outliers = np.mean(np.abs(pooled - 1) > 3 * mad)
    q = np.quantile(pooled, [0.01, 0.05, 0.5, 0.95, 0.99])
    print(f"  pooled: {pooled.size} repeats, robust sd (1.4826 MAD) {mad:.2%}, beyond 3 robust sd: "
          f"{outliers:.1%}; quantiles 1/5/50/95/99%: " + " ".join(f"{v:.3f}" for v in q))


class Sampler:
    """Draws repeats of one side: a random cell's relative repeats, resampled with replacement. Pooled:
    every cell's deviations from its mean in one pool, widened by sqrt(n/(n-1)) (a deviation from a mean of
    n values is that much narrower than the noise), for stores with few repeats per cell."""

    def __init__(self, cells: dict[str, np.ndarray], rng: np.random.Generator, pooled: bool = False) -> None:
        if pooled:
            devs = [(x / x.mean() - 1) * math.sqrt(x.size / (x.size - 1)) for x in cells.values()]
            self.pools = [1 + np.concatenate(devs)]
        else:
            self.pools = [x / np.median(x) for x in cells.values()]
        self.rng = rng

    def pool(self) -> np.ndarray:
        return self.pools[self.rng.integers(len(self.pools))]

    def fixed(self, pool: np.ndarray, n: int) -> np.ndarray:
        return self.rng.choice(pool, n)

    def adaptive(self, pool: np.ndarray, rule: AdaptiveRepeats = ADAPTIVE) -> np.ndarray:
        """Repeats drawn the way `matrix run` adds them: min first, then the batches the rule asks for."""
        values = list(self.rng.choice(pool, rule.min))
        while True:
            a = assess(values, rule)
            if a.stop is not Stop.MORE:
                return np.array(values)
            values += list(self.rng.choice(pool, a.more))


def simulate(sampler: Sampler, setting: str, sims: int, tests: dict[str, significance.PValue]
             ) -> dict[str, dict[str, float]]:
    """Per test: gate FP, test FP, and per slowdown the gate's and the test's power; and mean repeats."""
    draw: Callable[[np.ndarray], np.ndarray]
    if setting.startswith("adaptive"):
        _, _, target = setting.partition(":")
        rule = ADAPTIVE.model_copy(update={"target_ci": float(target.rstrip("%")) / 100}) if target else ADAPTIVE

        def draw(pool: np.ndarray) -> np.ndarray:
            return sampler.adaptive(pool, rule)
    else:
        n = int(setting)

        def draw(pool: np.ndarray) -> np.ndarray:
            return sampler.fixed(pool, n)

    counts = {name: {"gate_fp": 0, "test_fp": 0, **{f"gate_{s}": 0 for s in SLOWDOWNS},
                     **{f"test_{s}": 0 for s in SLOWDOWNS}} for name in tests}
    repeats = 0
    for _ in range(sims):
        pool = sampler.pool()
        a = draw(pool)
        b0 = draw(pool)
        repeats += a.size + b0.size
        for name, test in tests.items():
            p = test(a, b0)
            change = a.mean() / b0.mean() - 1
            if p < significance.ALPHA:
                counts[name]["test_fp"] += 1
                if change > THRESHOLD:
                    counts[name]["gate_fp"] += 1
        for s in SLOWDOWNS:
            # The same noise, slowed down: B's throughput is A's / (1 + s), "1.03x slower" for s = 3%.
            b = draw(pool) / (1 + s)
            for name, test in tests.items():
                p = test(a, b)
                if p < significance.ALPHA:
                    counts[name][f"test_{s}"] += 1
                    if a.mean() / b.mean() - 1 > THRESHOLD:
                        counts[name][f"gate_{s}"] += 1
    out = {name: {k: v / sims for k, v in c.items()} for name, c in counts.items()}
    for name in out:
        out[name]["repeats"] = repeats / (2 * sims)
    return out


def split_half(cells: dict[str, np.ndarray], tests: dict[str, significance.PValue]) -> None:
    print("\nReal A/A, no resampling: each cell's first half of repeats against its second half")
    for name, test in tests.items():
        trips = sig = 0
        for x in cells.values():
            h = x.size // 2
            a, b = x[:h], x[h:2 * h]
            p = test(a, b)
            sig += p < significance.ALPHA
            trips += bool(p < significance.ALPHA and a.mean() / b.mean() - 1 > THRESHOLD)
        print(f"  {name:<13} significant in {sig} of {len(cells)} cells; gate slower:3% trips in {trips}")


def replay_savings(cells: dict[str, np.ndarray], fixed: int = 10) -> None:
    print(f"\nAdaptive rule {{min: {ADAPTIVE.min}, max: {ADAPTIVE.max}, target_ci: {ADAPTIVE.target_ci:.0%}}} "
          f"replayed on each cell's repeats in measured order, against a fixed {fixed}:")
    total = decided = 0
    for label, x in cells.items():
        a = replay(list(x), ADAPTIVE)
        if a.stop is Stop.MORE:
            print(f"  {label:<34} still wider than the target after all {x.size} stored repeats "
                  f"(CI ±{a.ci:.1%}): the rule would run {ADAPTIVE.max - x.size} or fewer more")
            continue
        print(f"  {label:<34} {a.n:>3} repeats, {a.words.split(': ', 1)[1]}, CI ±{a.ci:.1%}")
        total += a.n
        decided += 1
    if decided:
        print(f"  {decided} cells decided: {total} repeats against {fixed * decided} for a fixed {fixed} "
              f"({1 - total / (fixed * decided):+.0%} saved)")
    undecided = len(cells) - decided
    if undecided:
        print(f"  {undecided} cells need more stored repeats to replay the rule to its end")


def fdr_check(sampler: Sampler, settings: list[int], pairs: int, sims: int, true_share: float,
              shifts: tuple[float, ...] = (0.05, 0.10)) -> None:
    """Comparisons of `pairs` pairs: how many pairs a comparison flags by chance, and how many true shifts it
    finds, with raw p-values and with Benjamini-Hochberg's over the comparison (docs/statistics.md)."""
    alpha = significance.ALPHA
    n_true = round(pairs * true_share)
    print(f"\nMany pairs, one threshold: comparisons of {pairs} pairs, {sims} simulated comparisons per row, "
          f"alpha {alpha}. compare: p < alpha and a change of at least {MIN_EFFECT:.0%}; gate: slower:"
          f"{THRESHOLD:.0%} (change > {THRESHOLD:.0%} and p < alpha). 'raw': each pair's p; 'BH': p adjusted "
          "over the comparison's pairs (what compare and the gate do).")
    print(f"  {'repeats':<8} {'pairs truly slower':<20} {'rule':<8} {'p':<4} {'FP/comp':>8} {'any FP':>7} "
          f"{'FDR':>6} {'power':>6}")
    scenarios = [(0.0, 0)] + [(s, n_true) for s in shifts]
    for n in settings:
        for shift, k in scenarios:
            tallies: dict[tuple[str, str], list[float]] = {}
            for _ in range(sims):
                a = np.array([sampler.fixed(sampler.pool(), n) for _ in range(pairs)])
                b = np.array([sampler.fixed(sampler.pool(), n) for _ in range(pairs)])
                b[:k] /= 1 + shift     # the first k pairs: B truly slower
                truth = np.arange(pairs) < k
                ma, mb = a.mean(axis=1), b.mean(axis=1)
                p = welch_from_stats(ma, a.std(axis=1, ddof=1), n, mb, b.std(axis=1, ddof=1), n)
                ratio = mb / ma
                rules = {"compare": np.maximum(ratio, 1 / ratio) - 1 >= MIN_EFFECT, "gate": ma / mb - 1 > THRESHOLD}
                for how, q in (("raw", p), ("BH", significance.adjust(p))):
                    for rule, big in rules.items():
                        flagged = big & (q < alpha)
                        false = int((flagged & ~truth).sum())
                        t = tallies.setdefault((rule, how), [0.0, 0.0, 0.0, 0.0])
                        t[0] += false
                        t[1] += false > 0
                        t[2] += false / max(int(flagged.sum()), 1)
                        t[3] += int((flagged & truth).sum()) / k if k else 0.0
            label = "none (A/A)" if not k else f"{k} by {shift:.0%}"
            for (rule, how), (fp, anyfp, fdr, power) in tallies.items():
                print(f"  {n:<8} {label:<20} {rule:<8} {how:<4} {fp / sims:>8.2f} {anyfp / sims:>7.1%} "
                      f"{fdr / sims:>6.1%} {'—' if not k else format(power / sims, '.1%'):>6}")


UNTIL = AdaptiveRepeats(min=3, max=20, until="decided")


def verdict(a: np.ndarray, b: np.ndarray, alpha: float = significance.ALPHA) -> tuple[Verdict, int | None]:
    """The gate slower:3% on one pair, as runner/analysis/gate.py decides a tested check (one pair: p as it is)."""
    diff = significance.difference(a, b)
    delta = change.of_samples(a, b, confidence=1 - alpha)
    if not diff.decided:
        return Verdict.UNDECIDED, None
    d = change.judge(delta, THRESHOLD, -1, diff.p_value, alpha, METRICS["throughput"])
    return d.verdict, d.needed


def until_decided(sampler: Sampler, pool: np.ndarray, slow: float, rule: AdaptiveRepeats = UNTIL
                  ) -> tuple[Verdict, int]:
    """Both sides grown as `matrix run` grows them under `until: decided` (runner/execution/decided_rounds.py): the
    levels from min to max (each about 1.6x the one before), the next one at or above what the estimate asks for,
    each look deciding at alpha over the number of levels."""
    looks = levels(rule.min, rule.max)
    alpha = significance.ALPHA / len(looks)
    a = list(sampler.fixed(pool, rule.min))
    b = list(sampler.fixed(pool, rule.min) / (1 + slow))
    while True:
        v, needed = verdict(np.array(a), np.array(b), alpha)
        n = len(a)
        if v is not Verdict.UNDECIDED or n >= rule.max:
            return v, n
        target = min([lv for lv in looks if lv > n] or [rule.max])  # one look at a time
        a += list(sampler.fixed(pool, target - n))
        b += list(sampler.fixed(pool, target - n) / (1 + slow))


def decisions(sampler: Sampler, settings: list[str], sims: int) -> list[tuple[str, str, dict[str, float]]]:
    """Per setting and truth (A/A, 3%, 5%, 10% slower): the shares of pass, fail and undecided, and mean repeats."""
    out = []
    for setting in settings:
        for slow in (0.0, *SLOWDOWNS):
            tally = {v: 0 for v in Verdict}
            repeats = 0
            for _ in range(sims):
                pool = sampler.pool()
                if setting == "until":
                    v, n = until_decided(sampler, pool, slow)
                elif setting == "adaptive":  # each side to a 1% interval of its mean (target_ci), then one look
                    a, b = sampler.adaptive(pool), sampler.adaptive(pool) / (1 + slow)
                    v, _ = verdict(a, b)
                    n = (a.size + b.size) // 2
                else:
                    n = int(setting)
                    v, _ = verdict(sampler.fixed(pool, n), sampler.fixed(pool, n) / (1 + slow))
                tally[v] += 1
                repeats += n
            truth = "A/A" if not slow else f"{slow:.0%} slower"
            out.append((setting, truth, {**{v.value: tally[v] / sims for v in Verdict}, "repeats": repeats / sims}))
    return out


def print_decisions(rows: list[tuple[str, str, dict[str, float]]], sims: int) -> None:
    print(f"\nDecisions of the gate slower:{THRESHOLD:.0%} (pass only when the interval of the change lies inside "
          f"{THRESHOLD:.0%}, 95% at a fixed count and 99% at each of the five looks of until decided; fail beyond it "
          f"and significant; else undecided), {sims} simulated pairs per row:")
    print(f"  {'repeats/side':<22} {'truth':<12} {'pass':>7} {'fail':>7} {'undecided':>10} {'mean n':>7}")
    for setting, truth, r in rows:
        label = {"until": f"until decided (3-{UNTIL.max})", "adaptive": "adaptive 1%"}.get(setting, setting)
        print(f"  {label:<22} {truth:<12} {r['pass']:>7.1%} {r['fail']:>7.1%} {r['undecided']:>10.1%} "
              f"{r['repeats']:>7.1f}")
    worst = max((r["pass"] for _, t, r in rows if t != "A/A"), default=0.0)
    false_fail = max((r["fail"] for _, t, r in rows if t == "A/A"), default=0.0)
    print(f"  worst false pass (a true slowdown of 3% or more passed): {worst:.1%}; worst false fail (A/A): "
          f"{false_fail:.1%} (goal: at most 5% each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=None, help="a store of CPU repeats (default: results/noise.db)")
    ap.add_argument("--csv", type=Path, action="append", default=[],
                    help="repeats.csv of a committed report instead of a store (repeatable)")
    ap.add_argument("--pooled", action="store_true", help="one pool of every cell's deviations (few repeats "
                    "per cell); default: resample within a cell")
    ap.add_argument("--sims", type=int, default=2000, help="simulated comparisons per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-repeats", type=int, default=6, help="cells with fewer ok repeats are left out")
    ap.add_argument("--settings", default="3,5,10,adaptive,adaptive:2%",
                    help="repeat counts per side, and/or adaptive (target_ci 1%%) or adaptive:X%%")
    ap.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples per test")
    ap.add_argument("--part", choices=("all", "tests", "fdr", "decisions"), default="all",
                    help="tests: the candidate tests per pair; fdr: many pairs at once, raw against BH; decisions: "
                    "the gate's pass, fail and undecided shares")
    ap.add_argument("--decision-settings", default="3,5,10,adaptive,until",
                    help="repeats per side for --part decisions, and/or adaptive (target_ci 1%%, 3-20) and until "
                    "(until decided, 3-20)")
    ap.add_argument("--fdr-pairs", type=int, default=100, help="pairs per simulated comparison (--part fdr)")
    ap.add_argument("--fdr-sims", type=int, default=200, help="simulated comparisons per row (--part fdr)")
    ap.add_argument("--fdr-true", type=float, default=0.10, help="share of pairs truly slower (--part fdr)")
    ap.add_argument("--fdr-repeats", default="3,5,10", help="repeats per side (--part fdr)")
    args = ap.parse_args()
    source = ", ".join(map(str, args.csv)) if args.csv else str(args.db or "results/noise.db")
    if args.csv:
        cells = load_csv(args.csv, args.min_repeats)
    else:
        cells = load_cells(args.db or Path("results/noise.db"), args.min_repeats)
    if not cells:
        sys.exit(f"{source}: no cell has {args.min_repeats}+ ok repeats; run the quickstart with more repeats")
    sims = f"{args.fdr_sims} simulated comparisons of {args.fdr_pairs} pairs" if args.part == "fdr" else (
        f"{args.sims} simulated comparisons per setting")
    print(f"stats_check: {source}{' (pooled)' if args.pooled else ''}, {len(cells)} cells, {sims}, seed "
          f"{args.seed}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load "
          f"{os.getloadavg()[0]:.2f}")
    noise_profile(cells)
    rng = np.random.default_rng(args.seed)
    if args.part in ("all", "decisions"):
        start = time.perf_counter()
        print_decisions(decisions(Sampler(cells, rng, args.pooled), args.decision_settings.split(","), args.sims),
                        args.sims)
        print(f"  (took {time.perf_counter() - start:.0f} s)")
        if args.part == "decisions":
            return
    if args.part in ("all", "fdr"):
        start = time.perf_counter()
        fdr_check(Sampler(cells, rng, args.pooled), [int(x) for x in args.fdr_repeats.split(",")], args.fdr_pairs,
                  args.fdr_sims, args.fdr_true)
        print(f"  (took {time.perf_counter() - start:.0f} s)")
        if args.part == "fdr":
            return

    def boot(a: np.ndarray, b: np.ndarray) -> float:
        return significance.bootstrap(a, b, resamples=args.resamples, seed=int(rng.integers(2**31)))

    tests = {"welch": significance.welch, "mann-whitney": significance.mann_whitney, "bootstrap": boot}
    print(f"\nGate `--fail-on slower:{THRESHOLD:.0%}` at alpha {significance.ALPHA}: trips when B is slower by "
          f"more than {THRESHOLD:.0%} AND p < alpha. 'test' columns: p < alpha alone (two-sided).")
    head = (f"  {'repeats/side':<14} {'test':<13} {'gate FP':>8} {'test FP':>8} "
            + " ".join(f"{'gate@' + format(s, '.0%'):>8}" for s in SLOWDOWNS) + " "
            + " ".join(f"{'test@' + format(s, '.0%'):>8}" for s in SLOWDOWNS) + f" {'mean n':>7}")
    print(head)
    start = time.perf_counter()
    for setting in args.settings.split(","):
        result = simulate(Sampler(cells, rng, args.pooled), setting.strip(), args.sims, tests)
        label = setting.strip()
        for name, r in result.items():
            print(f"  {label:<14} {name:<13} {r['gate_fp']:>8.1%} {r['test_fp']:>8.1%} "
                  + " ".join(f"{r[f'gate_{s}']:>8.1%}" for s in SLOWDOWNS) + " "
                  + " ".join(f"{r[f'test_{s}']:>8.1%}" for s in SLOWDOWNS) + f" {r['repeats']:>7.1f}")
    se = math.sqrt(0.05 * 0.95 / args.sims)
    print(f"  (binomial standard error of a 5% rate over {args.sims} comparisons: {se:.1%}; "
          f"took {time.perf_counter() - start:.0f} s)")
    split_half(cells, {k: v for k, v in tests.items()})
    replay_savings(cells)


if __name__ == "__main__":
    main()
