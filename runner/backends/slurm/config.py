"""What a slurm environment says in matrix.yaml: where the jobs go, what they ask for, how they start."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from runner.backends import containers
from runner.backends.containers import Bind, ContainerSpec
from runner.domain.cells import EnvironmentBase

TIME_RE = re.compile(r"^(\d+-)?\d+(:\d+){0,2}$|^UNLIMITED$|^INFINITE$", re.IGNORECASE)
MEM_RE = re.compile(r"^\d+[KMGT]?$", re.IGNORECASE)
OPTION_RE = re.compile(r"^(--[A-Za-z][A-Za-z0-9-]*|-[A-Za-z])(?:[= ](.*))?$", re.DOTALL)
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BARE_SBATCH_RE = re.compile(r"^[A-Za-z0-9_./:@%+,=\-\[\]]+$")
JOB_ID_RE = re.compile(r"^\d+$")
TASK_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
CONTROL = ("\n", "\r", "\0")
# Options the script sets itself from the environment's fields and the cell's layout.
OWN_OPTIONS = frozenset({
    "--job-name", "-J", "--array", "-a", "--nodes", "-N", "--ntasks-per-node", "--time", "-t",
    "--chdir", "-D", "--output", "-o", "--error", "-e", "--comment", "--partition", "-p",
    "--account", "-A", "--qos", "-q", "--cpus-per-task", "-c", "--mem",
})


def no_control(value: str | None, what: str) -> str | None:
    if value is not None and any(c in value for c in CONTROL):
        raise ValueError(f"{what} must be one line (no newline, carriage return or NUL): {value!r}")
    return value


class SlurmEnvironment(EnvironmentBase):
    """An environment on a Slurm cluster: where the jobs go, what they ask for, how they start."""

    backend: Literal["slurm"] = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = Field(default=None, description="Slurm time limit per array task (minutes, HH:MM:SS, "
                             "D-HH:MM); default: the run's timeout rounded up to minutes")
    gpus_per_node: int | None = Field(default=None, ge=0, description="GPUs to request per node; default: the "
                                      "cell's gpus; 0: CPU nodes, gpus: N then means N processes per node")
    gpu_option: Literal["gres", "gpus-per-node"] = "gres"
    cpus_per_task: int | None = Field(default=None, ge=1)
    mem: str | None = Field(default=None, description="memory per node, as sbatch --mem takes it (e.g. 16G)")
    sbatch_options: list[str] = Field(default=[], description="extra sbatch options, one per item: "
                                      "--constraint=a100, --exclusive, --reservation=x")
    setup: list[str] = Field(default=[], description="shell lines run before the benchmark (module load ..., "
                             "source venv/bin/activate): shell by design, inserted as written")
    container: ContainerSpec | None = Field(default=None, description="run the ranks in a container: {runtime: "
                                            "apptainer|pyxis|podman|charliecloud, image: ...}; a plain string is a "
                                            "pyxis image")
    results_dir: str | None = Field(default=None, description="a directory every node sees (shared filesystem); "
                                    "each run gets <results_dir>/<run_id>; default <workdir>/slurm")
    poll_interval: float = Field(default=10.0, gt=0, description="seconds between two sacct polls")
    max_array_size: int = Field(default=1000, ge=1, description="array tasks per sbatch (the cluster's "
                                "MaxArraySize - 1 at most)")
    array_parallelism: int | None = Field(default=None, ge=1, description="at most this many tasks of an "
                                          "array run at once (--array=0-N%K)")
    blocked_after: float = Field(default=60.0, ge=0, description="seconds a job may pend for a reason "
                                 "that does not clear (partition down, job held, ...) before matrix cancels it")
    measured_fields = ("partition", "container", "setup", "gpus_per_node")

    @field_validator("time", mode="before")
    @classmethod
    def _time_text(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and not TIME_RE.match(value):
            raise ValueError(f"not a Slurm time limit: {value!r}; use minutes, MM:SS, HH:MM:SS or D-HH:MM:SS")
        return value

    @field_validator("mem")
    @classmethod
    def _mem_text(cls, value: str | None) -> str | None:
        if value is not None and not MEM_RE.match(value):
            raise ValueError(f"not an sbatch --mem value: {value!r}; use a number with K, M, G or T")
        return value

    @field_validator("partition", "account", "qos", "results_dir")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        return no_control(value, "the value")

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            match = OPTION_RE.match(option.strip())
            if not match:
                raise ValueError(f"not an sbatch option: {option!r}; write it as --name=value or --flag")
            no_control(option, "an sbatch option")
            if match.group(1) in OWN_OPTIONS:
                raise ValueError(f"{match.group(1)} is set by matrix: use the environment's own field "
                                 "(partition, account, qos, time, cpus_per_task, mem) or the gpus/nodes axes")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not ENV_NAME_RE.match(name):
                raise ValueError(f"not a shell variable name: {name!r}; use letters, digits and _")
        return value

    @model_validator(mode="after")
    def _container_mounts(self) -> SlurmEnvironment:
        if self.container:
            for m in self.mounts:
                if any(c in part for part in (m.source, m.target) for c in CONTROL):
                    raise ValueError(f"mount {m.source!r}: one line, no newline or NUL")
            problems = containers.runtime(self.container).problems(
                [Bind(m.source, m.target, m.read_only) for m in self.mounts])
            if problems:
                raise ValueError("; ".join(problems))
        return self
