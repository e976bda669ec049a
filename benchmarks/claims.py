"""What claiming costs and whether it holds under contention: P processes claim and store the same
N repeats of one store as fast as they can (no benchmark runs: a claim, then a result with a realistic
payload), as `matrix run` processes sharing a store do.

Prints the time per repeat (claim + store + release) for one process alone and for P at once, how many
repeats each process stored, and the number of repeats stored more than once (must be 0).

    .venv/bin/python benchmarks/claims.py --repeats 400 --processes 4
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runner import matrix  # noqa: E402
from runner.domain.cells import Task  # noqa: E402
from runner.domain.outcomes import Outcome, Status  # noqa: E402
from runner.execution import execute  # noqa: E402
from runner.store import Store  # noqa: E402

TEXT = """
name: claims
environments: [{name: cpu, backend: local}]
axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}
run: {repeats: %d}
"""


def outcome() -> Outcome:
    result = {"schema": 1, "status": "ok", "metrics": {"throughput": 100.0, "iter_times": [0.01] * 50},
              "env": {"torch": "2.13.0"}}
    return Outcome(Status.OK, result, "log line\n" * 100, "", time.time(), time.time())


def worker(db: str, repeats: int, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    (cell,) = matrix.parse(TEXT % repeats).cells()
    want = execute.Want(since=0)
    with Store(db) as store:
        run_id = f"bench-{os.getpid()}"
        store.start_run(run_id, None, "claims", [])
        start.wait()
        stored, took = 0, []
        for r in range(repeats):
            t0 = time.perf_counter()
            task = Task(cell, r)
            if store.claim(run_id, [task], want.needs, here=False)[task.id].mine:
                stored += store.record(run_id, task, outcome(), want.needs)
            took.append(time.perf_counter() - t0)
        store.finish_run(run_id, "complete")
    out.put((os.getpid(), stored, statistics.median(took)))


def trial(processes: int, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "r.db")
        Store(db).close()
        start = multiprocessing.Event()
        out: multiprocessing.Queue = multiprocessing.Queue()
        procs = [multiprocessing.Process(target=worker, args=(db, repeats, start, out)) for _ in range(processes)]
        for p in procs:
            p.start()
        time.sleep(1.0)
        t0 = time.perf_counter()
        start.set()
        results = [out.get() for _ in procs]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
        with Store(db, readonly=True) as store:
            rows = Counter((r.cell_key, r.repeat) for r in store.rows(latest_only=False))
        twice = sum(1 for n in rows.values() if n > 1)
        print(f"{processes} process(es), {repeats} repeats: {wall:.2f} s wall, {wall / repeats * 1000:.2f} ms per "
              f"repeat; median claim+store per attempt {statistics.median(r[2] for r in results) * 1000:.2f} ms; "
              f"stored per process {sorted(r[1] for r in results)}; stored {len(rows)}, more than once {twice}")
        if twice or len(rows) != repeats:
            raise SystemExit("FAILED: a repeat was stored twice or not at all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    trial(1, args.repeats)
    trial(args.processes, args.repeats)


if __name__ == "__main__":
    main()
