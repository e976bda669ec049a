"""How long `matrix publish` takes on a big history: 100,000 repeats from three machines.

    .venv/bin/python benchmarks/publish_speed.py [--repeats 100000] [--machines 3] [--rounds 3] [--keep DIR]

Each machine measured 12 cells x 28 repeats a night for as many nights as the total needs (about 100 runs a
machine), one with a 20% step halfway; the machines' results are exported and imported into one store, as a
team would pool them, and the site is published from it. Target: at most 15 s on a 2-core machine.
With `--browser`, headless Chromium loads the index, the largest cell page and a run page from file:// (each
timed from the start of Chromium to its DOM, less Chromium's own start on about:blank). Target: under 2 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import shutil as _shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner.commands.export import export_command  # noqa: E402
from runner.commands.import_ import import_command  # noqa: E402
from runner.publish import publish  # noqa: E402
from tests.store.synthetic import fill_history  # noqa: E402

CELLS, REPEATS = 12, 28
HOSTS = (("alpha", "AMD EPYC 7B13"), ("beta", "Intel Xeon Platinum 8375C"), ("gamma", "Ampere Altra"))


def pooled_store(folder: Path, repeats: int, machines: int) -> Path:
    runs = max(2, round(repeats / machines / CELLS / REPEATS))
    db = folder / "pooled.db"
    for n in range(machines):
        host, cpu = HOSTS[n % len(HOSTS)]
        own = fill_history(folder / f"{host}{n}.db", f"{host}{n}", cpu, runs, REPEATS, CELLS, seed=n,
                           step_at=runs // 2 if n == 1 else None, step=0.8, first_run=1.7e9 + n)
        export_command(own, folder / f"{host}{n}.jsonl.gz", None, None)
        import_command(db, [folder / f"{host}{n}.jsonl.gz"])
    return db


def load_time(page: str, profile: Path) -> float:
    chromium = _shutil.which("chromium") or "/usr/bin/chromium"
    t = time.perf_counter()
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                    "--dump-dom", page], capture_output=True, timeout=120, check=True)
    return time.perf_counter() - t


def browser(site: Path) -> None:
    profile = site.parent / "chromium-profile"
    blank = min(load_time("about:blank", profile) for _ in range(3))
    cells = sorted((site / "cells").glob("*.html"), key=lambda p: p.stat().st_size)
    for name, page in (("index", site / "index.html"), ("largest cell", cells[-1]),
                       ("a run", next(iter(sorted((site / "runs").glob("*.html")))))):
        took = min(load_time(page.as_uri(), profile) for _ in range(3))
        print(f"browser: {name} ({page.stat().st_size / 1024:.0f} KiB) loads in {max(took - blank, 0):.2f} s "
              f"(Chromium's start on about:blank, {blank:.2f} s, taken off; target < 2 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=100_000)
    ap.add_argument("--machines", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="keep the store and the site here")
    ap.add_argument("--browser", action="store_true", help="also time headless Chromium loading the pages")
    args = ap.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="publish-speed-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        t0 = time.perf_counter()
        db = pooled_store(folder, args.repeats, args.machines)
        print(f"store: {db} ({db.stat().st_size / 2**20:.0f} MiB), built in {time.perf_counter() - t0:.1f} s")
        times, files = [], []
        for _ in range(args.rounds):
            t = time.perf_counter()
            files = publish([db], folder / "site")
            times.append(time.perf_counter() - t)
        size = sum(f.stat().st_size for f in files) / 2**20
        print(f"publish: {len(files)} files, {size:.1f} MiB; best {min(times):.2f} s, median "
              f"{statistics.median(times):.2f} s over {args.rounds} rounds (target <= 15 s); "
              f"load average {os.getloadavg()[0]:.1f}")
        if args.browser:
            browser(folder / "site")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
