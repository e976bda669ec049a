"""How the warm-up rule behaves (runner/bench/timing.py `steady`): false alarms on noise without a trend, the
trends it sees, and where it ends the warm-up of the recorded traces in tests/bench/test_timing.py.

    .venv/bin/python benchmarks/warmup_rule.py

Prints three Markdown tables (docs/statistics.md, "Warm-up and measured windows"):
- "false alarms": the share of checks that call trend-free noise not steady (lognormal iteration times with the
  given CV), per window size; a false alarm costs one more warm-up iteration, never a wrong result;
- "detection": the share of checks that see a step of the given size between the two windows (the medians of
  the last two windows differ by that much), at the given noise;
- "traces": the warm-up each recorded trace gets, and the window calibrated from it.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.bench import timing  # noqa: E402
from tests.bench.test_timing import CPU_TRACE, GPU_TRACE, RULE  # noqa: E402

CHECKS = 4000


def alarms(window: int, cv: float, step: float, rng: random.Random) -> float:
    sigma = math.sqrt(math.log(1 + cv * cv))
    hits = 0
    for _ in range(CHECKS):
        trace = [math.exp(rng.gauss(0, sigma)) * (1 + step) for _ in range(window)]
        trace += [math.exp(rng.gauss(0, sigma)) for _ in range(window)]
        hits += timing.steady(trace, window, timing.STEADY_TOLERANCE) is False
    return hits / CHECKS


def main() -> int:
    rng = random.Random(0)
    print(f"Tolerance {timing.STEADY_TOLERANCE:.0%}, noise allowance {timing.NOISE_Z} standard errors; "
          f"{CHECKS} checks per figure, seed 0.\n")
    print("False alarms (trend-free noise called not steady), per check:\n")
    cvs = (0.01, 0.05, 0.2, 0.5)
    print("| window | " + " | ".join(f"CV {c:.0%}" for c in cvs) + " |")
    print("| ---: | " + " | ".join("---:" for _ in cvs) + " |")
    for w in (3, 5, 8):
        print(f"| {w} | " + " | ".join(f"{alarms(w, c, 0.0, rng):.1%}" for c in cvs) + " |")
    print("\nDetection (a step between the two windows seen as not steady), window 5, per check:\n")
    steps = (0.05, 0.1, 0.2, 0.5, 1.0)
    print("| noise CV | " + " | ".join(f"step {s:.0%}" for s in steps) + " |")
    print("| ---: | " + " | ".join("---:" for _ in steps) + " |")
    for c in (0.01, 0.05, 0.2):
        print(f"| {c:.0%} | " + " | ".join(f"{alarms(5, c, s, rng):.1%}" for s in steps) + " |")
    print("\nRecorded traces (tests/bench/test_timing.py), rule {max: 50, window: 5, tolerance: 5%}:\n")
    print("| trace | warm-up | how | window for 2 s | s per iteration |")
    print("| --- | ---: | --- | ---: | ---: |")
    ramp = [0.1 * 0.96 ** i for i in range(200)]
    for name, trace in (("GPU, autotune start (H200 ResNet-50)", GPU_TRACE), ("CPU, loaded 2-vCPU VM", CPU_TRACE),
                        ("ramp, 4% per iteration", ramp)):
        done, how = timing.replay_warmup(trace, 0, RULE)
        n, per = timing.calibrate(trace[:done], 2.0, 5, 10000)
        print(f"| {name} | {done} | {how} | {n} | {per:.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
