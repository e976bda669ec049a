"""Pyxis (NVIDIA's SPANK plugin for srun) with enroot: srun itself starts every rank in the container.

Command line as documented in the pyxis README and `srun --help` of pyxis 0.17 (`--container-image`,
`--container-mounts=SRC:DST[:FLAGS],...`, `--container-workdir`); not run here (Debian has no enroot).
"""

from __future__ import annotations

from runner.backends.containers.base import Launch, Runtime, q, register


@register
class Pyxis(Runtime):
    name = "pyxis"
    default_executable = None
    documented = "the pyxis 0.17 README and srun --help"
    # srun starts the rank wrapper inside the container: it writes the rank's files into the results directory.
    wraps_rank = True

    @property
    def executable(self) -> str:
        return "enroot"  # what must be on every node; pyxis itself is a plugin of srun

    def srun_options(self, launch: Launch) -> list[str]:
        mounts = ",".join(f"{b.source}:{b.target}" + (":ro" if b.read_only else "")
                          for b in self.binds(launch, results_writable=True))
        # The job's environment passes into the container (pyxis tests/env.bats); GPUs come with the
        # Slurm allocation through enroot's NVIDIA hook, so no GPU option is needed.
        return [f"--container-image={self.spec.image}", f"--container-mounts={mounts}",
                f"--container-workdir={self.results_inside(launch)}", *self.spec.options]

    def command(self, launch: Launch) -> list[str]:
        return []

    def image_file(self) -> str | None:
        return self.spec.image if self.spec.image.startswith(("/", "./", "../")) else None

    def check_lines(self, launch: Launch) -> list[str]:
        lines = [
            "srun --help 2>/dev/null | grep -q -- --container-image || fail " + q(
                "srun has no --container-image option: the pyxis plugin is not installed "
                "(plugstack.conf) where this job runs"),
            "need_runtime enroot " + q("pyxis needs enroot on every node"),
        ]
        lines.append("file_image" if self.image_file() else 'fact image_reference "$IMAGE"')
        return lines
