"""A program whose figure is known in advance: BASE (the environment's) times a spread that depends only on the
repeat, so that a gate over it is undecided at three repeats and decided by more (tests/execution/test_until_decided.py).
It prints a throughput and its window, as a training script's log would."""

import math
import os
import sys

repeat = int(sys.argv[1])
base = float(os.environ["STEADY_BASE"])
phase = float(os.environ.get("STEADY_PHASE", "0"))
spread = float(os.environ.get("STEADY_SPREAD", "0.06"))
value = base * (1 + spread * math.sin(2.3 * repeat + phase))
print(f"throughput: {value:.4f} samples/s")
print("window: 10.0 s")
