"""The batch script of one job array: what it says (`ArrayJob`), built from an environment and a
node shape, rendered from templates/slurm.sh.j2 with every value quoted for sbatch or bash."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path

import jinja2

from runner.backends.slurm.config import BARE_SBATCH_RE, CONTROL, OPTION_RE, SlurmEnvironment
from runner.errors import ConfigError

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
    bench_name: str  # the benchmark's zipapp (runner/artifact.py), a file name in results_dir
    python: str
    options: tuple[tuple[str, str | None], ...]
    env: tuple[tuple[str, str], ...]
    setup: tuple[str, ...]
    srun_args: tuple[str, ...]


def _jinja() -> jinja2.Environment:
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


def array_job(env: SlurmEnvironment, *, count: int, gpus: int, nodes: int, time: str, run_id: str,
              results_dir: Path, manifest: str, bench_name: str) -> ArrayJob:
    srun: list[str] = []
    if env.container:
        mounts = [f"{results_dir}:{results_dir}"] + [
            f"{m.source}:{m.target}" + (":ro" if m.read_only else "") for m in env.mounts]
        srun += [f"--container-image={env.container}", f"--container-mounts={','.join(mounts)}",
                 f"--container-workdir={results_dir}"]
    array = f"0-{count - 1}" + (f"%{env.array_parallelism}" if env.array_parallelism else "")
    return ArrayJob(job_name=job_name(env.name), comment=f"matrix run {run_id}", array=array,
                    nodes=nodes, ntasks_per_node=gpus, time=time, results_dir=str(results_dir),
                    manifest=manifest, bench_name=bench_name, python=env.python or "python3",
                    options=tuple(sbatch_options(env, gpus)), env=tuple(sorted(env.env.items())),
                    setup=tuple(env.setup), srun_args=tuple(srun))
