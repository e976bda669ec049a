"""What `container:` of a slurm environment says: which runtime starts the ranks, from which image.

Needs nothing installed: a matrix validates on a host without any runtime.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from runner.domain.cells import Strict

# Where each container runtime lives, by the name `container.runtime` takes: the one list of runtimes (its
# module registers the class, runner/backends/containers/base.py; docs/internals.md, "How to add a container
# runtime").
RUNTIME_MODULES = {
    "apptainer": "runner.backends.containers.apptainer",
    "pyxis": "runner.backends.containers.pyxis",
    "podman": "runner.backends.containers.podman",
    "charliecloud": "runner.backends.containers.charliecloud",
}
RUNTIME_NAMES = tuple(RUNTIME_MODULES)
CONTROL = ("\n", "\r", "\0")


class ContainerSpec(Strict):
    """`container: {runtime: podman, image: ...}`; a plain string is a pyxis image (the older form)."""

    runtime: str
    image: str = Field(min_length=1, description="apptainer: a .sif file or a docker:// (oras://, library://) "
                       "reference; pyxis: an enroot image (nvcr.io#nvidia/pytorch:24.10-py3) or a .sqsh file; "
                       "podman: an image in the nodes' podman storage; charliecloud: an image directory or "
                       "SquashFS file")
    executable: str | None = Field(default=None, description="the runtime's command on the nodes (default: "
                                   "apptainer, podman, ch-run; singularity works for apptainer); not for pyxis")
    options: list[str] = Field(default=[], description="more options for the runtime's run command (pyxis: "
                               "srun's), one per item, e.g. --cleanenv or --container-env=LANG")

    @model_validator(mode="before")
    @classmethod
    def _plain_image_is_pyxis(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"runtime": "pyxis", "image": value}
        return value

    @field_validator("runtime")
    @classmethod
    def _known_runtime(cls, value: str) -> str:
        if value not in RUNTIME_MODULES:
            names = [repr(n) for n in RUNTIME_NAMES]
            raise ValueError(f"{value!r} is not allowed; allowed: {', '.join(names[:-1])} or {names[-1]}")
        return value

    @field_validator("image", "executable")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is not None and (any(c in value for c in CONTROL) or value != value.strip()):
            raise ValueError(f"{value!r}: one line, without leading or trailing spaces")
        if value is not None and value.startswith("-"):  # it would be read as an option of the runtime
            raise ValueError(f"{value!r} starts with '-': an image or command, not an option (use `options`)")
        return value

    @field_validator("options")
    @classmethod
    def _options(cls, value: list[str]) -> list[str]:
        for option in value:
            if not option.startswith("-") or any(c in option for c in CONTROL):
                raise ValueError(f"not a runtime option: {option!r}; one option per item, starting with -")
        return value

    @model_validator(mode="after")
    def _no_executable_for_pyxis(self) -> ContainerSpec:
        if self.runtime == "pyxis" and self.executable:
            raise ValueError("pyxis is srun's plugin: it has no executable of its own (drop `executable`)")
        return self
