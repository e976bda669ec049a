"""How long reading and expanding a matrix takes per cell, and how fast an oversized one is refused.

A grid of a million cells (an axis typed out too long) used to take minutes in `matrix plan`: every cell
key was re-hashed on each access. Prints, for grids of growing size, the seconds to parse the file, to
expand it and to ask each cell's key three times (as plan and run do), and the time to refuse a
million-cell grid above --max-cells.

    .venv/bin/python benchmarks/plan_speed.py [--cells 1000 10000 100000]
"""

from __future__ import annotations

import argparse
import math
import os
import time

from runner import matrix
from runner.base.errors import ConfigError

TEMPLATE = """
environments:
  - {{name: cpu, backend: local, env: {{OMP_NUM_THREADS: "2"}}}}
axes:
  model: [mnist_cnn]
  batch_size: [{batch}]
  lr: [{lr}]
"""


def grid(cells: int) -> str:
    side = max(1, int(math.sqrt(cells)))
    return TEMPLATE.format(batch=", ".join(str(i) for i in range(1, side + 1)),
                           lr=", ".join(f"0.{i:06d}" for i in range(1, cells // side + 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for n in args.cells:
        text = grid(n)
        t0 = time.perf_counter()
        m = matrix.parse(text, max_cells=n)
        t1 = time.perf_counter()
        cells = m.cells()
        t2 = time.perf_counter()
        for _ in range(3):
            keys = [c.key for c in cells]
        t3 = time.perf_counter()
        print(f"{len(cells):>8} cells: parse {t1 - t0:6.2f} s, expand {t2 - t1:6.2f} s "
              f"({(t2 - t1) / len(cells) * 1e6:5.1f} µs a cell), keys x3 {t3 - t2:5.2f} s ({len(set(keys))} distinct)")
    text = grid(1_000_000)
    t0 = time.perf_counter()
    try:
        matrix.parse(text)
    except ConfigError as e:
        print(f"1,000,000 cells refused in {time.perf_counter() - t0:.2f} s: {e}")


if __name__ == "__main__":
    main()
