"""Charliecloud: `ch-run` around each rank, over an image directory or SquashFS file that every node sees.

Command line as documented in ch-run(1) of Charliecloud 0.31 (run here for real: Debian bookworm's
0.31). ch-run shares the node's network and hostname and passes the host's environment through;
`--set-env` adds the image's own (/ch/environment, written by ch-convert), as Docker would. Its binds
must land on directories that exist in the image and are always read-write in 0.31, so the results
directory goes to /mnt/0 (images have /mnt/0-9 for this) and read-only mounts are refused. GPUs need
the host's driver libraries injected once with `ch-fromhost --nvidia IMAGE`.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.backends.containers.base import Bind, Launch, Runtime, q, register

RESULTS_INSIDE = "/mnt/0"


@register
class Charliecloud(Runtime):
    name = "charliecloud"
    default_executable = "ch-run"
    documented = "ch-run(1) of Charliecloud 0.31"

    def results_inside(self, launch: Launch) -> str:
        return RESULTS_INSIDE

    def command(self, launch: Launch) -> list[str]:
        words = [self.executable]
        for b in self.binds(launch):
            words += ["--bind", f"{b.source}:{b.target}"]
        return [*words, "--cd", RESULTS_INSIDE, "--set-env", *self.spec.options, self.spec.image, "--"]

    def binds(self, launch: Launch, results_writable: bool = False) -> list[Bind]:
        return super().binds(launch, results_writable=True)  # ch-run 0.31 binds read-write, always

    def problems(self, binds: Sequence[Bind]) -> list[str]:
        out = super().problems(binds)
        for b in binds:
            if b.read_only:
                out.append(f"Charliecloud 0.31 binds read-write only: mount {b.source} -> {b.target} asks for "
                           "read-only; set read_only: false on it to accept a writable bind, or use another runtime")
        return out

    def image_file(self) -> str | None:
        return self.spec.image

    def check_lines(self, launch: Launch) -> list[str]:
        lines = ["need_runtime ch-run " + q("install Charliecloud there (charliecloud-runtime), or set "
                                              "container.executable"),
                 "file_image",
                 # --set-env reads the image's /ch/environment (ch-convert writes it).
                 '[ ! -d "$IMAGE" ] || [ -f "$IMAGE/ch/environment" ] || fail "image $IMAGE has no '
                 '/ch/environment, which ch-run --set-env reads: convert it with ch-convert"',
                 f'[ ! -d "$IMAGE" ] || [ -d "$IMAGE{RESULTS_INSIDE}" ] || fail "image $IMAGE has no '
                 f'{RESULTS_INSIDE}, where the results directory is bound"']
        for b in launch.binds:
            lines.append(f'[ ! -d "$IMAGE" ] || [ -d "$IMAGE"{q(b.target)} ] || fail "image $IMAGE has no '
                         f'directory "{q(b.target)}" to bind {q(b.source)} on: ch-run 0.31 binds only onto '
                         'directories that exist in the image"')
        if launch.gpus_per_node > 0:
            lines.append('[ ! -d "$IMAGE" ] || find "$IMAGE/usr" "$IMAGE/lib"* -maxdepth 4 -name "libcuda.so*" '
                         '2>/dev/null | grep -q . || fail "image $IMAGE has no libcuda.so: run ch-fromhost '
                         '--nvidia $IMAGE on a GPU node once"')
        return [*lines, self.try_start(launch)]
