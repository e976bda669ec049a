"""Runner overhead: `matrix run` over N cells against N bare benchmark invocations of the same cells.

Prints both wall times and their ratio (target <= 1.05). The runner's time includes its own
start-up (imports, validation, store writes, progress); the bare loop is the floor.

    .venv/bin/python benchmarks/overhead.py [--cells 8] [--iterations 20] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner import matrix
from runner.backends import artifact


def make_matrix(cells: int, iterations: int) -> str:
    sizes = [8 * (i + 1) for i in range(cells)]
    return (f"name: overhead\nenvironments: [{{name: cpu, backend: local, env: {{OMP_NUM_THREADS: '2'}}}}]\n"
            f"axes: {{model: [mnist_cnn], precision: [fp32], batch_size: {sizes}, device: [cpu]}}\n"
            f"run: {{iterations: {iterations}, warmup: 5, repeats: 1, timeout: 600}}\n")


def bare(cells: list[matrix.Cell]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    for cell in cells:
        subprocess.run([sys.executable, str(artifact.path()), *cell.bench_args()], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def runner(yaml_path: Path, db: Path, workdir: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "runner.cli", "run", "-m", str(yaml_path), "--db", str(db),
                    "--workdir", str(workdir)], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=8)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        yaml_path = Path(tmp) / "overhead.yaml"
        yaml_path.write_text(make_matrix(args.cells, args.iterations))
        cells = matrix.load(yaml_path).cells()
        bare_t, run_t = [], []
        for r in range(args.rounds):
            bare_t.append(bare(cells))
            run_t.append(runner(yaml_path, Path(tmp) / f"r{r}.db", Path(tmp) / "work"))
            print(f"round {r + 1}: bare {bare_t[-1]:.2f} s, matrix run {run_t[-1]:.2f} s, "
                  f"ratio {run_t[-1] / bare_t[-1]:.3f}", flush=True)
    b, m = statistics.median(bare_t), statistics.median(run_t)
    print(f"\nmachine: {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    print(f"{args.cells} cells (mnist_cnn fp32 cpu, {args.iterations} iterations), {args.rounds} rounds, medians:")
    print(f"  bare bench loop    : {b:8.2f} s  ({b / args.cells:.2f} s per cell)")
    print(f"  matrix run         : {m:8.2f} s  ({m / args.cells:.2f} s per cell)")
    print(f"  overhead           : {m - b:8.2f} s  ({(m - b) / args.cells:.3f} s per cell)")
    print(f"  ratio              : {m / b:8.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
