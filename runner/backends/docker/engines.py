"""The engines the docker backend talks to, one small class each, looked up by the name `engine:` takes
(docs/internals.md, "How to add a Docker-side engine"): where it listens, how the SDK client reaches it, how
a session knows it is this engine, how it takes GPUs, its doctor check and the hints for its refusals.
engine.py asks these questions and never branches on an engine's name.

No Docker SDK here: a matrix validates `engine:` against this registry on a host without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from runner.backends.base import Probe
from runner.base.registry import Registry

# Where each built-in engine lives; importing the module registers it. `engine:` unset is DEFAULT's client
# (DOCKER_HOST, else the current Docker context), whichever engine answers there.
MODULES = {"docker": "runner.backends.docker.engine_docker", "podman": "runner.backends.docker.engine_podman"}
DEFAULT = "docker"


class EngineKind:
    """An engine with Docker's API. Subclass it, set the class variables, answer what differs, register an
    instance (`register`)."""

    name: ClassVar[str]             # as `engine:` names it, and as results store it (container_runtime)
    title: ClassVar[str]            # as messages name it: "Docker", "Podman"
    bring_up: ClassVar[str] = ""    # how to start it and load the test image, after images/debian-torch/build.sh

    def address(self) -> str:
        """Where it listens, as messages say it."""
        raise NotImplementedError

    def base_url(self) -> str | None:
        """Where the SDK client connects; None: `docker.from_env()` (DOCKER_HOST, else the Docker context)."""
        return self.address()

    def unreachable(self, where: str) -> str:
        """What to say when nothing answers at `where`."""
        return f"no {self.title} engine answers at {where}"

    def not_this(self) -> str:
        """What to do when another engine answers where this one was asked for."""
        return f"point engine {self.name!r} at a {self.title} engine"

    def recognises(self, components: Sequence[str]) -> bool:
        """Whether a session is this engine, by the names of its version's components."""
        raise NotImplementedError

    def gpu_options(self, gpus: Any) -> dict[str, Any]:
        """How the environment's `gpus` go into the container's create options."""
        raise NotImplementedError

    def refused(self, text: str, env: str | None, gpus: Any, what: str, started: bool) -> str | None:
        """The reason to give when the engine refused to create (`started` False) or to start a container of
        `what`, saying `text`; None: the refusal is said as it is."""
        return None

    def gpu_check(self, label: str, info: dict[str, Any], smi: str | None) -> Probe:
        """`matrix doctor`: what this engine offers for GPUs (`info`: its answer; `smi`: nvidia-smi, if any)."""
        return Probe(f"{label} GPUs", None, "no GPU check for this engine")

    def absent(self, why: str) -> Probe:
        """`matrix doctor`: the check for this engine when nothing answers where it listens."""
        return Probe(f"{self.name} engine", None, why)


ENGINES: Registry[EngineKind] = Registry("engine", MODULES, ordered=True)


def register(kind: EngineKind) -> EngineKind:
    """Make an engine available to `engine:` under its name (a name taken twice is refused)."""
    return ENGINES.register(kind.name, kind)


def engine(name: str | None) -> EngineKind:
    """The engine `engine:` names; unset: the default client's."""
    return ENGINES.get(name or DEFAULT)


def identify(components: Sequence[str], asked: str | None = None) -> str:
    """Which engine a session is: the one asked for when it recognises the session, else the first that does,
    else the default (an engine that names no components)."""
    if asked and ENGINES.get(asked).recognises(components):
        return asked
    return next((n for n in ENGINES.names() if ENGINES.get(n).recognises(components)), DEFAULT)


def engine_address(name: str | None = None) -> str:
    """Where the engine `engine:` names listens."""
    return engine(name).address()


def engine_hint(name: str | None = None) -> str:
    """What to say when the engine `engine:` names does not answer."""
    kind = engine(name)
    return kind.unreachable(kind.address())
