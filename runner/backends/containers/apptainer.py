"""Apptainer (and SingularityCE, `executable: singularity`): `apptainer exec` around each rank.

Command line as documented in the Apptainer 1.3 user guide ("apptainer exec", "Bind Paths and Mounts",
"GPU Support": `--nv`); not run here (Debian has no Apptainer).
"""

from __future__ import annotations

from typing import ClassVar

from runner.backends.containers.base import Launch, Runtime, q, register


@register
class Apptainer(Runtime):
    name = "apptainer"
    default_executable = "apptainer"
    documented = "the Apptainer 1.3 user guide: apptainer exec, --bind, --pwd, --nv"
    refused_options = ("--add-caps", "--allow-setuid", "--keep-privs")
    SCHEMES: ClassVar[tuple[str, ...]] = ("docker://", "docker-archive:", "oras://", "library://", "shub://",
                                          "http://", "https://")

    def command(self, launch: Launch) -> list[str]:
        words = [self.executable, "exec"]
        if launch.gpus_per_node > 0:
            words.append("--nv")
        for b in self.binds(launch):
            words += ["--bind", f"{b.source}:{b.target}" + (":ro" if b.read_only else "")]
        # The host environment passes into the container by default: RANK, MASTER_ADDR, ... reach bench.py.
        words += ["--pwd", self.results_inside(launch), *self.spec.options, self.spec.image]
        return words

    def image_file(self) -> str | None:
        return None if self.spec.image.startswith(self.SCHEMES) else self.spec.image

    def check_lines(self, launch: Launch) -> list[str]:
        lines = ["need_runtime Apptainer " + q("load its module in `setup`, or set container.executable "
                                                "(singularity for SingularityCE)")]
        if self.image_file():
            lines.append("file_image")
        else:
            lines.append('fact image_reference "$IMAGE"')
        return [*lines, self.try_start(launch)]
