"""How fast the command line answers: whole processes, each command alternated with the import of the libraries it is
built on (`python -c 'import typer, rich'`), medians over the pairs.

    .venv/bin/python benchmarks/cli_speed.py [--db results/demo.db] [--pairs 9]

`--db`: a store for `ls` and `show` (`make demo` writes results/demo.db). Each command runs once first, so that its
bytecode is written and the file cache is warm (run without PYTHONDONTWRITEBYTECODE: an installed matrix has its
bytecode). Goals: `--help` under 0.3 s and within 3x of the import, `ls` and `show` under 0.5 s, on the 2-vCPU VM.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def once(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path("results/demo.db"))
    ap.add_argument("--pairs", type=int, default=9)
    args = ap.parse_args()
    if not args.db.exists():
        sys.exit(f"no store at {args.db}: run `make demo` first, or pass --db")
    matrix = str(Path(sys.executable).with_name("matrix"))
    commands = {"matrix --help": [matrix, "--help"], "matrix ls": [matrix, "ls", "--db", str(args.db)],
                "matrix show": [matrix, "show", "--db", str(args.db)]}
    reference = [sys.executable, "-c", "import typer, rich"]
    for argv in commands.values():
        once(argv)
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {"import typer, rich": []} | {name: [] for name in commands}
    for _ in range(args.pairs):
        for name, argv in commands.items():
            times["import typer, rich"].append(once(reference))
            times[name].append(once(argv))
    ref = statistics.median(times["import typer, rich"])
    print(f"{args.pairs} pairs each; load average {load:.2f} before, {os.getloadavg()[0]:.2f} after, "
          f"{os.cpu_count()} CPUs")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:20s} median {median:.3f} s (min {min(values):.3f}), {median / ref:.1f}x the import")


if __name__ == "__main__":
    main()
