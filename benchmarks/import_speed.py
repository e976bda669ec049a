"""How long `matrix export` and `matrix import` take: three machines' stores of `--repeats` repeats in all,
exported, imported into a new store, and imported again (nothing new: every repeat checked against its digest).

    .venv/bin/python benchmarks/import_speed.py [--repeats 100000] [--machines 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.commands.export import export_command  # noqa: E402
from runner.commands.import_ import import_command  # noqa: E402
from tests.store.synthetic import fill_history  # noqa: E402

CELLS, REPEATS = 12, 28


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100_000)
    ap.add_argument("--machines", type=int, default=3)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="import-speed-"))
    try:
        runs = max(2, round(args.repeats / args.machines / CELLS / REPEATS))
        files = []
        export_s = 0.0
        for n in range(args.machines):
            own = fill_history(folder / f"m{n}.db", f"host{n}", "CPU", runs, REPEATS, CELLS, seed=n, first_run=1.7e9 + n)
            t = time.perf_counter()
            export_command(own, folder / f"m{n}.jsonl.gz", None, None)
            export_s += time.perf_counter() - t
            files.append(folder / f"m{n}.jsonl.gz")
        total = args.machines * runs * CELLS * REPEATS
        size = sum(f.stat().st_size for f in files) / 2**20
        t = time.perf_counter()
        first = import_command(folder / "pooled.db", files)
        first_s = time.perf_counter() - t
        t = time.perf_counter()
        again = import_command(folder / "pooled.db", files)
        again_s = time.perf_counter() - t
        assert all(" 0 repeats stored" in line for line in again), again
        print(f"{total} repeats from {args.machines} machines; files {size:.1f} MiB gzip")
        print(f"export: {export_s:.2f} s ({total / export_s:,.0f} repeats/s)")
        print(f"import into a new store: {first_s:.2f} s ({total / first_s:,.0f} repeats/s); {first[0]}")
        print(f"import again (nothing new): {again_s:.2f} s ({total / again_s:,.0f} repeats/s)")
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
