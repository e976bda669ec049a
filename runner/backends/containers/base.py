"""One container runtime under Slurm: how a rank starts in it, its GPU flags and mounts, what it needs
on a node, and how its image is identified. The batch script (runner/backends/slurm/script.py) asks
these questions and renders the answers, quoted; it never branches on the runtime's name.

A runtime's check runs once per job on every node, before any rank starts (`check_lines`): bash lines
that end in `fail "reason"` when something is missing (the tasks are then `not_started` with that
reason) and otherwise record facts with `fact KEY VALUE` (the runtime's version, the image's identity),
which travel with every result of the job.
"""

from __future__ import annotations

import abc
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from runner.backends.containers.config import RUNTIME_MODULES, ContainerSpec
from runner.base.registry import Registry

# Paths that runtimes split on: `SRC:DST[:ro]` lists joined with `,` (pyxis, apptainer, podman, ch-run).
MOUNT_SEPARATORS = (",", ":")


@dataclass(frozen=True)
class Bind:
    """One bind mount into the container."""

    source: str
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Launch:
    """What the ranks of one job need from their container, whatever the runtime."""

    results_dir: str                 # the run's directory on the shared filesystem; holds the benchmark zipapp
    binds: tuple[Bind, ...]          # the environment's mounts
    gpus_per_node: int
    env_names: tuple[str, ...]       # variables the bench process must see (rank layout, `env:`)
    run_id: str
    time_limit_s: int | None = None  # the job's time limit, when it has one


@dataclass(frozen=True)
class ImageIdentity:
    """What the controller found out about a file or directory image before the job was submitted."""

    sha256: str | None = None   # of the file, or of the directory tree (every file's path, mode and content)
    what: str = ""              # "file" or "directory tree"
    stat: str | None = None     # "SIZE MTIME" as `stat -L -c '%s %Y'` prints them, to see a change on the node
    problem: str | None = None  # why there is no hash (not visible from here, unreadable)


class Runtime(abc.ABC):
    """A container runtime: one small class per runtime, looked up by `container.runtime`."""

    name: ClassVar[str]
    default_executable: ClassVar[str | None]
    # The documentation its command line follows (docs/slurm.md says which were run for real here).
    documented: ClassVar[str]
    # True: srun itself starts every rank inside the container (pyxis), so the rank wrapper runs there
    # and writes its files through a read-write mount of the results directory. False: the wrapper runs
    # on the node and `command()` starts the container around the bench process.
    wraps_rank: ClassVar[bool] = False
    # Options a user may not add (`options:`): matrix runs no privileged containers.
    refused_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, spec: ContainerSpec) -> None:
        self.spec = spec

    @property
    def executable(self) -> str:
        return self.spec.executable or self.default_executable or self.name

    # -- launching a rank ------------------------------------------------------------------------

    def srun_options(self, launch: Launch) -> list[str]:
        """Options of the ranks' `srun` (pyxis); most runtimes need none."""
        return []

    @abc.abstractmethod
    def command(self, launch: Launch) -> list[str]:
        """The words before `python BENCH.pyz ...` on each rank (empty when srun starts the container)."""

    def results_inside(self, launch: Launch) -> str:
        """Where the results directory (and the benchmark zipapp in it) is seen inside the container."""
        return launch.results_dir

    def binds(self, launch: Launch, results_writable: bool = False) -> list[Bind]:
        """The results directory (read-only unless the rank wrapper writes there) and the environment's mounts."""
        return [Bind(launch.results_dir, self.results_inside(launch), not results_writable), *launch.binds]

    def problems(self, binds: Sequence[Bind]) -> list[str]:
        """Why these binds or the spec's options cannot be launched (a path the runtime cannot bind, ...).
        Asked when the matrix is loaded (the environment's mounts) and before a job is submitted (all binds)."""
        out = []
        for bind in binds:
            for path in (bind.source, bind.target):
                bad = [c for c in MOUNT_SEPARATORS if c in path]
                if bad:
                    out.append(f"{self.name} cannot bind the path {path!r}: its mount lists are separated by "
                               f"',' and ':' (found {' and '.join(repr(c) for c in bad)})")
        for option in self.spec.options:
            name = option.split("=", 1)[0]
            if name in self.refused_options:
                out.append(f"container option {name} is refused: matrix runs no privileged containers "
                           f"(refused for {self.name}: {', '.join(self.refused_options)})")
        return out

    def launch_problems(self, launch: Launch) -> list[str]:
        return self.problems(self.binds(launch, self.wraps_rank))

    # -- what a node needs -----------------------------------------------------------------------

    @abc.abstractmethod
    def check_lines(self, launch: Launch) -> list[str]:
        """bash run once per node before the ranks: `fail "why"` when something is missing, `fact K V` otherwise.

        `$RUNTIME` is the executable and `$IMAGE` the image; `fail`, `fact`, `need_runtime`, `file_image`
        and `try_start` are defined by the check's template (runner/backends/slurm/templates/check.sh.j2)."""

    def try_start(self, launch: Launch) -> str:
        """The check's last line: one container started as the ranks' are, running `true`, so that a
        runtime that cannot start here (a bind, a limit, a broken image) is a reason, not a failed repeat."""
        return "try_start " + joined(self.command(launch))

    def image_file(self) -> str | None:
        """A file or directory that is the image, hashed by the controller at submission; None for an
        image that lives in the runtime's own storage or a registry (the node reports its identity)."""
        return None


def q(value: object) -> str:
    return shlex.quote(str(value))


def joined(words: Sequence[str]) -> str:
    return " ".join(q(w) for w in words)


R = TypeVar("R", bound=type[Runtime])
# Every runtime by its `container.runtime` name, in spec.RUNTIME_MODULES order; a runtime's module is imported
# when its name is first asked for, and registers its class with `register`.
RUNTIMES: Registry[type[Runtime]] = Registry("container runtime", RUNTIME_MODULES, ordered=True)


def register(cls: R) -> R:
    """Class decorator: make the runtime available under `cls.name`."""
    RUNTIMES.register(cls.name, cls)
    return cls
