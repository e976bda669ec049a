"""The kit's outputs besides its store: the hand-written reference loop run beside bench for a cell, the
report folder, and the pack (state and report in one file) that the next call resumes from."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runner.kit.evidence import Kit
    from runner.kit.settings import KitCell

ROOT = Path(__file__).resolve().parents[2]
PACK_SKIP = ("cache",)     # generated data: made again where it is missing


def reference_path(kit: Kit, c: KitCell) -> Path:
    """Where the hand-written reference loop's figures for a cell are kept."""
    return kit.state / "reference" / f"{c.id}.json"

def run_reference(kit: Kit, c: KitCell) -> bool:
    """benchmarks/bench_vs_reference.py with the calibrated iterations of the same cell: bench and the loop
    alternate, fresh processes each. False when it did not fit in the budget."""
    path = reference_path(kit, c)
    if path.exists():
        return True
    if c.iterations is None:
        kit.say("reference: its cell is not calibrated yet; next call")
        return True
    need = 2 * c.phase.repeats * kit.repeat_estimate(c)
    if need > kit.budget.left():
        kit.stopped = "budget"
        kit.say(f"stopping: the reference loop needs ~{need:.0f} s, {kit.budget.text()}")
        return False
    p = c.params
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_vs_reference.py"), "--model", str(p["model"]),
            "--batch-size", str(p["batch_size"]), "--precision", str(p["precision"]),
            "--device", str(p["device"]), "--iterations", str(c.iterations), "--warmup", str(c.warmup),
            "--repeats", str(c.phase.repeats), "--json", str(path.with_suffix(".tmp"))]
    argv += ["--channels-last"] if p.get("channels_last") else []
    argv += ["--cudnn-benchmark"] if p.get("cudnn_benchmark") else []
    argv += ["--threads", str(p["threads"])] if p.get("threads") else []
    path.parent.mkdir(exist_ok=True)
    started = time.monotonic()
    left = kit.budget.left()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=None if math.isinf(left) else max(left, 1.0),
                              env={**os.environ, "PYTHONPATH": pythonpath()})
    except subprocess.TimeoutExpired:
        kit.stopped = "budget"
        kit.say("reference: stopped at the budget's deadline; it runs again next call")
        return False
    with open(kit.log_path, "a") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        kit.say(f"reference: bench_vs_reference.py failed (exit {proc.returncode}): "
                 f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}")
        path.with_suffix(".failed").write_text(proc.stdout + proc.stderr)
        return True
    os.replace(path.with_suffix(".tmp"), path)
    kit.say(f"reference: {proc.stdout.strip().splitlines()[-1]} ({time.monotonic() - started:.0f} s; "
             f"{kit.budget.text()})")
    return True

def out_dir(kit: Kit) -> Path:
    """reports/<the GPU's name> unless --out says otherwise."""
    if kit.args.out is not None:
        return Path(kit.args.out)
    names = [d.get("device_name") for d in kit.decided.values() if d.get("device_name")]
    name = names[0] if names else ("cpu-dry-run" if kit.args.dry_run else "gpu")
    from runner.report.render import slug
    return Path("reports") / slug(str(name).lower().replace(" ", "-"))

def report(kit: Kit) -> None:
    from runner.kit import tables
    out = out_dir(kit)
    if not kit.db.exists():
        kit.say("no repeat stored yet: no report")
        return
    files = tables.write(kit, out)
    kit.say(f"report: {out} ({len(files)} files)")

def pack(kit: Kit) -> None:
    if kit.args.pack is None:
        return
    if kit.db.exists():  # the store in one file: its write-ahead log folded in
        import sqlite3
        with contextlib.closing(sqlite3.connect(kit.db)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    out = out_dir(kit)
    target = Path(kit.args.pack)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for folder in (kit.state, out):
            if not folder.exists():
                continue
            for path in sorted(folder.rglob("*")):
                rel = path.relative_to(kit.state) if folder == kit.state else None
                if rel is not None and rel.parts and rel.parts[0] in PACK_SKIP:
                    continue
                if path.is_file() and not path.name.endswith(("-shm", "-wal")):
                    tar.add(path, arcname=kit._rel(path), recursive=False)
    os.replace(tmp, target)
    kit.say(f"packed the state and the report: {target} ({target.stat().st_size / 2**20:.2f} MiB); unpack it "
             "in the checkout's root to continue from it")


def pythonpath() -> str:
    """The checkout first, so `python -m runner...` and bench_vs_reference find this package."""
    parts = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return os.pathsep.join(dict.fromkeys(parts))
