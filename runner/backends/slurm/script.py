"""The batch script of one job array: what it says (`ArrayJob`), built from an environment and a
node shape, rendered from templates/slurm.sh.j2 with every value quoted for sbatch or bash."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.backends import containers
from runner.backends.containers import Bind, ImageIdentity, Launch, Runtime
from runner.backends.slurm.config import BARE_SBATCH_RE, CONTROL, OPTION_RE, SlurmEnvironment
from runner.base.errors import ConfigError

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).with_name("templates")


def shell_quote(value: object) -> str:
    """bash quoting for every value the script uses (shlex.quote: single quotes, nothing expands)."""
    return shlex.quote(str(value))


def sbatch_quote(value: object) -> str:
    """Quoting as sbatch reads `#SBATCH` lines: it, not bash, parses them.

    sbatch strips single and double quotes and takes a backslash as an escape, also inside quotes;
    an unquoted `#` starts a comment. Nothing is expanded, but a newline would end the line.
    """
    text = str(value)
    if any(c in text for c in CONTROL):
        raise ConfigError(f"sbatch option value {text!r} has a newline or NUL; #SBATCH values are one line")
    if BARE_SBATCH_RE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# The variables a container's bench process must see: podman passes only those it is told to (a trailing
# `*` names a prefix); the other runtimes pass the job's environment through.
CONTAINER_ENV = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "PYTHONUNBUFFERED", "MATRIX_TASK", "CUDA_VISIBLE_DEVICES", "SLURM_*", "NCCL_*", "GLOO_*")


@dataclass(frozen=True)
class RuntimeCheck:
    """The per-node check of a container job (templates/check.sh.j2)."""

    runtime: str
    documented: str  # the documentation its command line follows
    executable: str
    image: str
    identity: ImageIdentity | None  # of a file or directory image (None: the node reports the identity)
    lines: tuple[str, ...]


@dataclass(frozen=True)
class ArrayJob:
    """Everything one rendered array script says; built by `array_job`, rendered by `render_script`."""

    job_name: str
    comment: str
    array: str
    nodes: int
    ntasks_per_node: int
    time: str
    results_dir: str
    manifest: str
    bench_name: str  # the benchmark's zipapp (runner/backends/artifact.py), a file name in results_dir
    python: str
    options: tuple[tuple[str, str | None], ...]
    env: tuple[tuple[str, str], ...]
    setup: tuple[str, ...]
    srun_args: tuple[str, ...]
    launch: tuple[str, ...] = ()        # the container runtime's words before python on each rank
    bench: str | None = None            # the zipapp's path inside the container, when not "$RESULTS/$BENCH_NAME"
    check: RuntimeCheck | None = None   # what the runtime needs on every node, checked before the ranks


def _jinja() -> jinja2.Environment:
    import jinja2  # only where a batch script is rendered: `matrix doctor` and `clean` ask the backend nothing of it
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=False,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["q"] = shell_quote
    env.filters["sbatch"] = sbatch_quote
    return env


def render_script(job: ArrayJob) -> str:
    return _jinja().get_template("slurm.sh.j2").render(**job.__dict__)


def time_limit(env: SlurmEnvironment, timeout_s: float) -> str:
    """The environment's limit, else the run's per-repeat timeout rounded up to whole minutes."""
    if env.time:
        return env.time
    return str(max(1, math.ceil(timeout_s / 60)))


def job_name(env_name: str) -> str:
    """The job's name in squeue: the environment's, with control characters made harmless."""
    return "matrix-" + "".join("?" if (ord(c) < 32 or ord(c) == 127) else c for c in env_name)


def sbatch_options(env: SlurmEnvironment, gpus: int) -> list[tuple[str, str | None]]:
    """The environment's #SBATCH options besides the layout: (option, value or None for a flag)."""
    options: list[tuple[str, str | None]] = []
    for name, value in (("--partition", env.partition), ("--account", env.account), ("--qos", env.qos),
                        ("--cpus-per-task", env.cpus_per_task), ("--mem", env.mem)):
        if value is not None:
            options.append((name, str(value)))
    per_node = gpus if env.gpus_per_node is None else env.gpus_per_node
    if per_node > 0:
        options.append(("--gres", f"gpu:{per_node}") if env.gpu_option == "gres"
                       else ("--gpus-per-node", str(per_node)))
    for raw in env.sbatch_options:
        match = OPTION_RE.match(raw.strip())
        if not match:
            raise ConfigError(f"environment {env.name!r}: not an sbatch option: {raw!r}")
        options.append((match.group(1), match.group(2)))
    return options


def container_launch(env: SlurmEnvironment, *, gpus: int, run_id: str, results_dir: Path,
                     time_s: int | None) -> tuple[Runtime, Launch] | None:
    """The environment's container runtime and what its ranks need, or None for bare metal."""
    if env.container is None:
        return None
    runtime = containers.runtime(env.container)
    per_node = gpus if env.gpus_per_node is None else env.gpus_per_node
    launch = Launch(results_dir=str(results_dir), gpus_per_node=per_node, run_id=run_id, time_limit_s=time_s,
                    binds=tuple(Bind(m.source, m.target, m.read_only) for m in env.mounts),
                    env_names=(*CONTAINER_ENV, *sorted(env.env)))
    return runtime, launch


def results_seen(env: SlurmEnvironment, results_dir: Path) -> str:
    """The results directory as a rank sees it: the same path on bare metal, its bind inside a container."""
    container = container_launch(env, gpus=0, run_id="", results_dir=results_dir, time_s=None)
    return container[0].results_inside(container[1]) if container is not None else str(results_dir)


def time_seconds(limit: str) -> int | None:
    """A Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]]) in seconds; None when unlimited."""
    text = limit.strip().upper()
    if text in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = text.rpartition("-")
    parts = [int(p) for p in rest.split(":")]
    if days:
        h, m, sec = (parts + [0, 0])[:3]
        return int(days) * 86400 + h * 3600 + m * 60 + sec
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def array_job(env: SlurmEnvironment, *, count: int, gpus: int, nodes: int, time: str, run_id: str,
              results_dir: Path, manifest: str, bench_name: str, identity: ImageIdentity | None = None) -> ArrayJob:
    """What one array's script says; `identity` is the controller's hash of a file or directory image."""
    srun: list[str] = []
    launch: list[str] = []
    bench: str | None = None
    check: RuntimeCheck | None = None
    container = container_launch(env, gpus=gpus, run_id=run_id, results_dir=results_dir, time_s=time_seconds(time))
    if container is not None:
        runtime, facts = container
        srun = runtime.srun_options(facts)
        launch = runtime.command(facts)
        inside = runtime.results_inside(facts)
        bench = None if inside == str(results_dir) else f"{inside}/{bench_name}"
        check = RuntimeCheck(runtime=runtime.name, documented=runtime.documented, executable=runtime.executable, image=runtime.spec.image,
                             identity=(identity or ImageIdentity(problem="not hashed by the controller"))
                             if runtime.image_file() else None, lines=tuple(runtime.check_lines(facts)))
    array = f"0-{count - 1}" + (f"%{env.array_parallelism}" if env.array_parallelism else "")
    return ArrayJob(job_name=job_name(env.name), comment=f"matrix run {run_id}", array=array,
                    nodes=nodes, ntasks_per_node=gpus, time=time, results_dir=str(results_dir),
                    manifest=manifest, bench_name=bench_name, python=env.python or "python3",
                    options=tuple(sbatch_options(env, gpus)), env=tuple(sorted(env.env.items())),
                    setup=tuple(env.setup), srun_args=tuple(srun), launch=tuple(launch), bench=bench, check=check)
