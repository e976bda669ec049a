#!/usr/bin/env python3
"""The quickstart measured twice, one cell faster the second time, then its report, its site and their screenshots,
into reports/quickstart-twice-cpu/ (the pages, and screenshots/ beside them):

    .venv/bin/python scripts/quickstart_screenshots.py [--db results/quickstart-twice.db] [--pages-only]

The first measurement runs `mnist_cnn fp32 batch 32` on one core (taskset) that a busy loop shares, with oneDNN held
to SSE4.1 and ATen to its scalar kernels (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY: examples/gate.yaml's `no-simd`;
read by PyTorch in the benchmark's process, part of no cell's definition), about 4x slower than it is, then the seven
other cells as they are; the second
measurement is `matrix run --force` of all eight as they are: that one cell is faster, the others the same (within
what a shared machine's noise lets them be). About 8 minutes on 2 cores. `--pages-only` skips the measuring and remakes the pages and screenshots from the store (after a
change to the report or the site); `--from FILE` does so from the measured repeats exported beside the pages
(`quickstart-twice.jsonl.gz`, imported into a new store). `--two-hosts` publishes reports/published-site-cpu/site
again from that folder's two exported stores, with its screenshots. Needs headless Chromium (scripts/browser-setup.sh)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATRIX = [str(ROOT / ".venv" / "bin" / "matrix")]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
OUT = ROOT / "reports" / "quickstart-twice-cpu"
EXPORT = "quickstart-twice.jsonl.gz"  # every repeat measured, as `matrix export` writes them (docs/exchange.md)
SLOWED = ["--only", "model=mnist_cnn", "--only", "precision=fp32", "--only", "batch_size=32"]
NO_SIMD = {"ONEDNN_MAX_CPU_ISA": "SSE41", "DNNL_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"}
CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--virtual-time-budget=15000"]


def matrix(*args: str, env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,), pin: bool = False) -> None:
    cmd = [*(["taskset", "-c", "0"] if pin else []), *MATRIX, *args]
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, check=False).returncode
    if rc not in ok:
        sys.exit(f"{' '.join(cmd)} exited {rc}")


def shoot(page: Path, png: Path, size: str, profile: Path) -> None:
    browser = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    cmd = [browser, *CHROMIUM, f"--user-data-dir={profile}", f"--window-size={size}", f"--screenshot={png}",
           page.as_uri()]
    subprocess.run(cmd, check=True, capture_output=True, timeout=180)
    print(png.relative_to(ROOT), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", type=Path, default=ROOT / "results" / "quickstart-twice.db")
    ap.add_argument("--pages-only", action="store_true", help="remake the pages and screenshots from --db")
    ap.add_argument("--from", dest="source", type=Path, help="remake them from this results file (matrix export)")
    ap.add_argument("--two-hosts", action="store_true", help="publish reports/published-site-cpu/ again instead")
    args = ap.parse_args()
    if args.two_hosts:
        return two_hosts(args.db.parent / "two-hosts.db")
    db = str(args.db)
    if args.source:
        if args.db.exists():
            sys.exit(f"{db} exists: pass another --db to import {args.source} into")
        matrix("import", str(args.source), "--db", db)
    elif not args.pages_only:
        if args.db.exists():
            sys.exit(f"{db} exists: pass another --db, or --pages-only to remake the pages from it")
        busy = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", "while True: pass"])
        try:
            matrix("run", "-m", str(QUICKSTART), "--db", db, *SLOWED, env=NO_SIMD, pin=True)
        finally:
            busy.kill()
            busy.wait()
        matrix("run", "-m", str(QUICKSTART), "--db", db)
        matrix("run", "-m", str(QUICKSTART), "--db", db, "--force")
    for folder in ("report", "site", "screenshots"):
        shutil.rmtree(OUT / folder, ignore_errors=True)
    matrix("report", "--db", db, "--format", "md", "--format", "html", "--format", "json", "--format", "csv",
           "--out", str(OUT / "report"))
    matrix("publish", "--db", db, "-o", str(OUT / "site"))
    if not args.source:
        (OUT / EXPORT).unlink(missing_ok=True)
        matrix("export", "--db", db, "-o", str(OUT / EXPORT))
    shots = OUT / "screenshots"
    shots.mkdir(parents=True)
    profile = args.db.parent / "quickstart-screenshots-profile"
    shoot(OUT / "report" / "report.html", shots / "report.png", "1400,1700", profile)
    shoot(OUT / "site" / "index.html", shots / "site-index.png", "1400,1700", profile)
    index = (OUT / "site" / "index.html").read_text()
    faster = re.search(r'<a href="(cells/[^"]+)">[^<]+</a>(?:(?!</tr>).)*<td class="better">', index, re.S)
    if faster:
        shoot(OUT / "site" / faster.group(1), shots / "site-faster-cell.png", "1400,1200", profile)
    else:
        print("no cell is faster than the run before on the index: no screenshot of its page", flush=True)
    shutil.rmtree(profile, ignore_errors=True)
    return 0


def two_hosts(db: Path) -> int:
    """reports/published-site-cpu/: its two hosts' exported stores imported into a new store, published, and its
    screenshots: the index, the first cell's history, the machines compared, the first run."""
    folder = ROOT / "reports" / "published-site-cpu"
    if db.exists():
        sys.exit(f"{db} exists: remove it first (it is made anew from {folder}'s two files)")
    matrix("import", str(folder / "host.jsonl.gz"), str(folder / "container.jsonl.gz"), "--db", str(db))
    matrix("publish", "--db", str(db), "-o", str(folder / "site"))
    shots = folder / "screenshots"
    shutil.rmtree(shots, ignore_errors=True)
    shots.mkdir()
    profile = db.parent / "two-hosts-screenshots-profile"
    site = folder / "site"
    shoot(site / "index.html", shots / "index.png", "1300,1500", profile)
    shoot(sorted((site / "cells").glob("*.html"))[0], shots / "cell.png", "1300,1100", profile)
    shoot(site / "machines.html", shots / "machines.png", "1300,700", profile)
    shoot(sorted((site / "runs").glob("*.html"))[0], shots / "run.png", "1300,700", profile)
    shutil.rmtree(profile, ignore_errors=True)
    db.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
