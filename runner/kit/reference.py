"""The hand-written reference loop beside bench for a cell (benchmarks/bench_vs_reference.py: the two alternate,
fresh processes each), run in its own process group so that the budget's deadline stops it and every process it
started (a benchmark or loop still training on the GPU)."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from runner import analysis as an
from runner.base import safewrite
from runner.kit.settings import KitCell, KitView

ROOT = Path(__file__).resolve().parents[2]


def pythonpath() -> str:
    """The checkout first, so `python -m runner...` and bench_vs_reference find this package."""
    parts = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return os.pathsep.join(dict.fromkeys(parts))


def reference_path(kit: KitView, c: KitCell) -> Path:
    """Where the hand-written reference loop's figures for a cell are kept."""
    return kit.state / "reference" / f"{c.id}.json"


def run_group(argv: Sequence[str], timeout: float, env: Mapping[str, str], cwd: Path | None = None
              ) -> tuple[int | None, str, str]:
    """Run argv in a new process group: (exit status, stdout, stderr), the status None when the timeout killed
    the whole group (the command and every process it started)."""
    proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=dict(env), start_new_session=True, cwd=cwd)
    try:
        out, err = proc.communicate(timeout=None if math.isinf(timeout) else max(timeout, 1.0))
        return proc.returncode, out, err
    except BaseException:  # the deadline, or the kit interrupted: nothing of the group outlives it
        _kill_group(proc.pid)
        out, err = proc.communicate()
        if sys.exc_info()[0] is subprocess.TimeoutExpired:
            return None, out, err
        raise


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# bench_vs_reference.py's statuses that carry a measurement (benchmarks/paired.py): within the tolerance, outside
# it, or not established at these repeats; the verdict is its last line, and the JSON its figures.
MEASURED = (0, 1, 5)


def reference_argv(c: KitCell, path: Path, iterations: int, warmup: int) -> list[str]:
    """The same model, batch, precision, layout, window and warm-up as the cell's stored repeats; its JSON to
    `path`."""
    p: dict[str, Any] = c.params
    argv = [sys.executable, str(ROOT / "benchmarks" / "bench_vs_reference.py"), "--model", str(p["model"]),
            "--batch-size", str(p["batch_size"]), "--precision", str(p["precision"]),
            "--device", str(p["device"]), "--iterations", str(iterations), "--warmup", str(warmup),
            "--repeats", str(c.phase.repeats), "--json", str(path)]
    argv += ["--channels-last"] if p.get("channels_last") else []
    argv += ["--cudnn-benchmark"] if p.get("cudnn_benchmark") else []
    argv += ["--threads", str(p["threads"])] if p.get("threads") else []
    return argv


def sizes(kit: KitView, c: KitCell) -> tuple[int, int] | None:
    """(iterations, warm-up) of the cell's admitted repeats: the iterations of the newest one's measured window (its
    count as the benchmark finally ran it, re-sized where the count it was given made a window shorter than asked)
    and the median of their warm-ups; None before one is admitted. Never the store's calibration as such: that is
    the first ok repeat's count, kept even when its window was refused (the first H100 run: 5 iterations, 0.27-s
    windows), and the loop checks no window time of its own."""
    from runner.store import Store
    if not kit.db.exists() or not c.key:
        return None
    with Store(kit.db, readonly=True) as store:
        ok = sorted((r for r in an.admitted(store.rows(keys=[c.key])) if r.ok), key=lambda r: r.id)
    counts = [n for n in (window_iterations(r) for r in ok) if n]
    warm = sorted(int((r.metrics.get("warmup") or {}).get("iterations") or 0) for r in ok)
    if not counts or not warm:
        return None
    return counts[-1], max(1, warm[len(warm) // 2])


def window_iterations(r: an.Repeat) -> int | None:
    """The iterations of a repeat's measured window (bench's metrics.iterations, else its calibration record's)."""
    for n in (r.metrics.get("iterations"), (r.metrics.get("calibration") or {}).get("iterations")):
        if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
            return n
    return None


def run_reference(kit: KitView, c: KitCell) -> bool:
    """bench_vs_reference.py on the cell; False when it did not fit in the budget (it runs next call)."""
    path = reference_path(kit, c)
    if path.exists():
        return True
    size = sizes(kit, c)
    if size is None:
        kit.say("reference: its cell has no admitted repeat yet (the headline's plain cell); next call")
        return True
    need = sum(kit.cost(c, r) for r in c.phase.wanted())  # as --plan counts it
    if need > kit.budget.left():
        kit.stopped = "budget"
        kit.say(f"stopping: the reference loop needs ~{need:.0f} s, {kit.budget.text()}")
        return False
    path.parent.mkdir(exist_ok=True)
    started = time.monotonic()
    # Its JSON lands in a new private folder (no name to plant a link at) and is renamed into place.
    private = Path(tempfile.mkdtemp(prefix=safewrite.PRIVATE_PREFIX, suffix=".tmp", dir=path.parent))
    try:
        made = private / path.name
        code, out, err = run_group(reference_argv(c, made, *size), kit.budget.left(),
                                   {**os.environ, "PYTHONPATH": pythonpath()})
        with safewrite.appending(kit.log_path) as f:
            f.write(out + err)
        if code is None:
            kit.stopped = "budget"
            kit.say("reference: stopped at the budget's deadline with every process it started; it runs again next call")
            return False
        if code not in MEASURED or not made.exists():
            kit.say(f"reference: bench_vs_reference.py failed (exit {code}): "
                    f"{(err.strip().splitlines() or [''])[-1][:200]}")
            safewrite.write_text(path.with_suffix(".failed"), out + err)
            return True
        safewrite.check(path)
        os.replace(made, path)
    finally:
        shutil.rmtree(private, ignore_errors=True)
    kit.say(f"reference: {(out.strip().splitlines() or [''])[-1]} ({time.monotonic() - started:.0f} s; "
            f"{kit.budget.text()})")
    return True
