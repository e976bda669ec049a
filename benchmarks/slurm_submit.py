"""Submitting a large matrix to Slurm: how long, how many sbatch calls, and what one poll costs.

Plans an N-cell matrix (default 1,000) for one slurm environment, submits it held (`--hold`, so
nothing runs) through the real backend, counts every Slurm command that went through `commands.slurm`,
then times the per-interval poll: one `sacct` call for all jobs plus the result-file listing.
The held jobs are scancelled at the end. A second, optional measurement (--rows N) runs an
N-task array of `true` so that sacct has N finished rows to return, as at the end of a run.

    .venv/bin/python benchmarks/slurm_submit.py [--cells 1000] [--polls 10] [--rows 1000]
        [--partition multi --nodes 1,2,3]

With --nodes the cells are spread over those node shapes (the `nodes` axis): one sbatch per shape.

Needs a Slurm with accounting (`sudo scripts/slurm-up.sh`).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runner import matrix
from runner.backends.context import RunContext
from runner.backends.slurm import SlurmBackend, commands
from runner.backends.slurm.backend import FINISHED_STATES
from runner.backends.slurm.state import Watched, state_key
from runner.domain.cells import Task
from runner.domain.outcomes import Outcome
from runner.store import Store


def make_matrix(cells: int, partition: str | None = None, nodes: list[int] | None = None) -> str:
    shapes = nodes or [1]
    sizes = list(range(1, cells // len(shapes) + 1))
    where = f" partition: {partition}," if partition else ""
    return ("name: slurm-submit\n"
            "environments:\n"
            f"  - {{name: held, backend: slurm,{where} python: /usr/bin/python3, gpus_per_node: 0,\n"
            "     sbatch_options: [--hold], poll_interval: 10, blocked_after: 3600}\n"
            f"axes: {{model: [mlp], precision: [fp32], batch_size: {sizes}, device: [cpu], nodes: {shapes}}}\n"
            "run: {iterations: 5, warmup: 1, repeats: 1, timeout: 60}\n")


def counting(calls: Counter[str]) -> Callable[..., Any]:
    real = commands.slurm

    def wrapper(args: list[str], **kwargs: Any) -> Any:
        calls[args[0]] += 1
        return real(args, **kwargs)
    return wrapper


def timed(fn: Callable[[], object], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def fmt(times: list[float]) -> str:
    ms = [t * 1000 for t in times]
    return (f"median {statistics.median(ms):.1f} ms (min {min(ms):.1f}, max {max(ms):.1f}, "
            f"n={len(ms)})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=1000)
    ap.add_argument("--polls", type=int, default=10)
    ap.add_argument("--rows", type=int, default=0, help="also time sacct over an N-task finished array")
    ap.add_argument("--partition", default=None, help="the environment's partition (default: the cluster's)")
    ap.add_argument("--nodes", default="1", help="node shapes, comma-separated (e.g. 1,2,3)")
    opts = ap.parse_args()
    nodes = [int(n) for n in opts.nodes.split(",")]

    calls: Counter[str] = Counter()
    commands.slurm = counting(calls)  # type: ignore[assignment]  # every Slurm command goes through this one function
    print(f"host: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    with tempfile.TemporaryDirectory(prefix="matrix-slurm-bench-") as tmp:
        start = time.perf_counter()
        m = matrix.parse(make_matrix(opts.cells, opts.partition, nodes))
        cells = m.cells()
        tasks = [Task(c, r) for c in cells for r in range(c.run.repeats)]
        plan_s = time.perf_counter() - start
        env = cells[0].environment
        store = Store(Path(tmp) / "matrix.db")
        ctx = RunContext(run_id="bench", workdir=Path(tmp), wait=False, store=store)
        reported: list[tuple[Task, Outcome]] = []
        start = time.perf_counter()
        with SlurmBackend(env, ctx) as backend:
            backend.run(tasks, lambda t, o: reported.append((t, o)))
        submit_s = time.perf_counter() - start
        submit_calls = dict(calls)
        records = store.open_jobs("slurm")
        jobs = sorted({r.job for r in records.values()}, key=int)
        try:
            print(f"plan {len(cells)} cells (node shapes {nodes}, partition {opts.partition or 'default'}): "
                  f"{plan_s * 1000:.0f} ms")
            print(f"submit {len(tasks)} tasks: {submit_s * 1000:.0f} ms, Slurm calls {submit_calls} "
                  f"(jobs {', '.join(jobs)}; {len(reported)} reported at submission)")
            print(f"sacct for all jobs of the run ({len(tasks)} held tasks): "
                  f"{fmt(timed(lambda: commands.sacct(jobs), opts.polls))}")
            watch = {k: Watched.from_record(t, k, records[k]) for t in tasks if (k := state_key(t)) in records}
            before = Counter(calls)
            poll_times = timed(lambda: backend._poll(dict(watch), lambda t, o: None), opts.polls)
            per_poll = {cmd: n / opts.polls for cmd, n in (calls - before).items()}
            print(f"one poll interval (sacct + result listing + {len(watch)} checks): {fmt(poll_times)}, "
                  f"Slurm calls per poll: {per_poll}")
        finally:
            if jobs:
                commands.scancel(jobs)
            store.close()
        if opts.rows:
            out = Path(tmp) / "rows"
            out.mkdir()
            where = [f"--partition={opts.partition}"] if opts.partition else []
            proc = commands.slurm(["sbatch", "--parsable", *where, f"--array=0-{opts.rows - 1}", "--time=1",
                                 f"--output={out}/%a.out", "--wrap", "true"])
            job = proc.stdout.strip().split(";")[0]
            deadline = time.time() + 900
            while True:
                rows = commands.sacct([job])
                if len(rows) == opts.rows and all(r.state in FINISHED_STATES for r in rows.values()):
                    break
                if time.time() > deadline:
                    print(f"the {opts.rows}-task array did not finish within 15 minutes")
                    return
                time.sleep(5)
            print(f"sacct for one array of {opts.rows} finished tasks: "
                  f"{fmt(timed(lambda: commands.sacct([job]), opts.polls))}")


if __name__ == "__main__":
    main()
