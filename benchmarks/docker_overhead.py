"""Docker backend overhead per repeat: the same cells through the docker and the local backend.

Both sides run the same Python + PyTorch where the host has it: Debian's torch 1.13 for
/usr/bin/python3 on the host (local backend) and in matrix/debian-torch:1.13 (docker backend),
so the per-repeat difference is what the docker backend adds beyond the bench process (exec
create/start/inspect, output over the engine's socket, the container check before each task).
A second figure needs no torch on the host: the same bench started bare inside the same
container (a python loop with subprocess) against the backend's repeats. The container's
start (once per environment and run) is reported apart. Target: under 0.5 s per repeat.

    .venv/bin/python benchmarks/docker_overhead.py [--repeats 10] [--iterations 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runner.backends.base import Backend  # noqa: E402
from runner.backends.context import RunContext  # noqa: E402
from runner.backends.docker import DockerBackend, DockerEnvironment  # noqa: E402
from runner.backends.docker.engine import Exec  # noqa: E402
from runner.backends.docker.host import TEST_IMAGE  # noqa: E402
from runner.backends.docker.payload import BENCH_IN  # noqa: E402
from runner.backends.local import LocalBackend, LocalEnvironment  # noqa: E402
from runner.domain.cells import Cell, RunSettings, Task  # noqa: E402
from runner.domain.outcomes import Outcome, Status  # noqa: E402

HOST_PYTHON = "/usr/bin/python3"
PARAMS: dict[str, str | int] = {"model": "mnist_cnn", "precision": "fp32", "batch_size": 16,
                                "dataset": "synthetic", "device": "cpu"}
ENV = {"OMP_NUM_THREADS": "1"}

# Runs inside the container: the bench as a bare subprocess, timed the way the backend's repeats are.
BARE = """import json, subprocess, sys, time
argv = json.loads(sys.argv[1]); times = []
for _ in range(int(sys.argv[2])):
    t = time.time()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    times.append(time.time() - t)
print(json.dumps(times))
"""


def host_has_torch() -> str | None:
    """torch's version for /usr/bin/python3 on the host, None when it has none."""
    try:
        out = subprocess.run([HOST_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                             text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def timed_repeat(backend: Backend, task: Task) -> float:
    """Wall seconds of one repeat as the runner sees it: from `on_start` to the sink."""
    began: list[float] = []
    walls: list[float] = []

    def sink(task: Task, outcome: Outcome) -> None:
        walls.append(time.perf_counter() - began[0])
        if outcome.status is not Status.OK:
            raise SystemExit(f"{task.cell.env_name} repeat {task.repeat}: {outcome.status.value}: {outcome.reason}")

    backend.ctx.on_start = lambda task: began.append(time.perf_counter())
    backend.run([task], sink)
    return walls[0]


def bare_in_container(backend: DockerBackend, task: Task) -> float:
    """The same bench started bare inside the backend's container; only the subprocess is timed."""
    assert backend.engine is not None and backend.container is not None and backend.python
    argv = [backend.python, BENCH_IN, *task.cell.bench_args()]
    api = backend.engine.client.api
    ex = api.exec_create(backend.container.id, [backend.python, "-c", BARE, json.dumps(argv), "1"])
    (took,) = json.loads(api.exec_start(ex["Id"]).decode())
    return float(took)


def exec_round_trips(backend: DockerBackend, n: int = 20) -> list[float]:
    """The backend's fixed cost per process: exec create + start + output stream + inspect of `true`."""
    assert backend.engine is not None and backend.container is not None
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ex = Exec(backend.engine.client.api, str(backend.container.id), ["true"], {"MATRIX_TASK": "bench"})
        ex.wait(60)
        if ex.exit_code() != 0:
            raise SystemExit("`true` failed in the container")
        times.append(time.perf_counter() - t0)
    return times


def cell_for(env: Any, iterations: int) -> Cell:
    return Cell(env, PARAMS, RunSettings(iterations=iterations, warmup=1, repeats=1, timeout=600, seed=0))


def describe(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.3f}" if values else "-"
    return (f"median {statistics.median(values):+.3f}, mean {statistics.fmean(values):+.3f} "
            f"± {statistics.stdev(values):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10, help="repeats per side")
    ap.add_argument("--iterations", type=int, default=5, help="bench iterations per repeat (small: overhead shows)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = ap.parse_args()
    torch_host = host_has_torch()
    sides: dict[str, list[float]] = {"docker": [], "bare": [], "local": []}
    with tempfile.TemporaryDirectory() as tmp:
        denv = DockerEnvironment(name="box", image=TEST_IMAGE, env=ENV)
        lenv = LocalEnvironment(name="metal", backend="local", python=HOST_PYTHON, env=ENV)
        docker_backend = DockerBackend(denv, RunContext(run_id=f"overhead-{os.getpid()}", workdir=Path(tmp)))
        local_backend = LocalBackend(lenv, RunContext(run_id=f"overhead-local-{os.getpid()}", workdir=Path(tmp)))
        with docker_backend, local_backend:
            t0 = time.perf_counter()
            failure = docker_backend.prepare()
            setup = time.perf_counter() - t0
            if failure:
                raise SystemExit(f"docker backend: {failure}")
            dcell, lcell = cell_for(denv, args.iterations), cell_for(lenv, args.iterations)
            runs = {
                "docker": lambda i: timed_repeat(docker_backend, Task(dcell, i)),
                "bare": lambda i: bare_in_container(docker_backend, Task(dcell, i)),
                "local": lambda i: timed_repeat(local_backend, Task(lcell, i)),
            }
            order = [k for k in runs if k != "local" or torch_host]
            # Interleaved, in a rotating order, so that a busy host slows every side alike.
            for i in range(args.repeats):
                for side in order[i % len(order):] + order[:i % len(order)]:
                    sides[side].append(runs[side](i))
            trips = exec_round_trips(docker_backend)
            t1 = time.perf_counter()
        teardown = time.perf_counter() - t1
    med = statistics.median
    vs_bare = [d - b for d, b in zip(sides["docker"], sides["bare"], strict=True)]
    print(f"docker backend overhead: {platform.node()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}, Python {platform.python_version()}, image {TEST_IMAGE}")
    print(f"cell: {PARAMS}, {args.iterations} iterations + 1 warm-up, {args.repeats} repeats per side, interleaved")
    print(f"  docker backend, s per repeat:         median {med(sides['docker']):.3f}")
    print(f"  bare bench in the same container:     median {med(sides['bare']):.3f}")
    figures: dict[str, Any] = {**sides, "container_setup_s": setup, "container_teardown_s": teardown,
                               "overhead_vs_bare_s": med(vs_bare)}
    worst = med(vs_bare)
    if torch_host:
        vs_local = [d - loc for d, loc in zip(sides["docker"], sides["local"], strict=True)]
        figures["overhead_vs_local_s"] = med(vs_local)
        worst = max(worst, med(vs_local))
        print(f"  local backend, {HOST_PYTHON} (torch {torch_host}): median {med(sides['local']):.3f}")
        print(f"  docker - local, paired:               {describe(vs_local)} s "
              f"(ratio of medians {med(sides['docker']) / med(sides['local']):.3f})")
    else:
        print(f"  local backend: skipped, {HOST_PYTHON} has no torch (apt-get install python3-torch)")
    print(f"  docker - bare in container, paired:   {describe(vs_bare)} s "
          f"(ratio of medians {med(sides['docker']) / med(sides['bare']):.3f})")
    figures["exec_round_trip_s"] = trips
    print(f"  one exec round trip of `true` (create, start, stream, inspect): median {med(trips) * 1000:.0f} ms, "
          f"min {min(trips) * 1000:.0f} ms")
    print(f"  once per environment and run: container start + python probe {setup:.3f} s, "
          f"kill + remove {teardown:.3f} s")
    print(f"  target: under 0.5 s per repeat -> {'met' if worst < 0.5 else 'NOT met'} ({worst:+.3f} s)")
    if args.json:
        print(json.dumps(figures))

if __name__ == "__main__":
    main()
