"""Podman: `podman run` around each rank, the image from the node's own podman storage.

Command line as documented in podman-run(1) of Podman 4.3 (run here for real: Debian bookworm's 4.3.1).
Each rank is one container that shares the node's network, hostname and IPC (gloo and NCCL reach the
other ranks as bare-metal processes do, and the result names the node, not a container id); GPUs come
through CDI (`--device nvidia.com/gpu=all`, with `nvidia-ctk cdi generate` run once on the node).
"""

from __future__ import annotations

from runner.backends.containers.base import Launch, Runtime, q, register

# Slurm sends SIGTERM at the time limit and SIGKILL KillWait later: podman run passes the SIGTERM on
# (--sig-proxy, its default), and --timeout ends a container whose podman run was killed first.
TIMEOUT_MARGIN_S = 120


@register
class Podman(Runtime):
    name = "podman"
    default_executable = "podman"
    documented = "podman-run(1) of Podman 4.3 (GPUs as CDI devices: --device nvidia.com/gpu=all)"
    refused_options = ("--privileged", "--cap-add", "--device-cgroup-rule")

    def command(self, launch: Launch) -> list[str]:
        words = [self.executable, "run", "--rm", "--pull=never", "--network=host", "--uts=host", "--ipc=host",
                 f"--label=matrix.run_id={launch.run_id}"]
        if launch.time_limit_s:
            words.append(f"--timeout={launch.time_limit_s + TIMEOUT_MARGIN_S}")
        for b in self.binds(launch):
            words.append(f"--volume={b.source}:{b.target}" + (":ro" if b.read_only else ""))
        words.append(f"--workdir={self.results_inside(launch)}")
        # Unlike the other runtimes podman passes no host variable unless named; a name whose variable
        # is unset on the node is left out (CUDA_VISIBLE_DEVICES without a GPU allocation).
        words += [f"--env={name}" for name in launch.env_names]
        if launch.gpus_per_node > 0:
            words.append("--device=nvidia.com/gpu=all")
        return [*words, *self.spec.options, self.spec.image]

    def check_lines(self, launch: Launch) -> list[str]:
        return [
            "need_runtime Podman " + q("install podman there, or set container.executable"),
            "found=\"$(\"$RUNTIME\" image inspect --format '{{.Id}} {{.Digest}}' \"$IMAGE\" 2>&1)\" || fail "
            "\"image $IMAGE is not in podman's image storage (${found##*: }): podman pull or "
            "podman load it on every node\"",
            'fact image_id "${found%% *}"',
            'fact repo_digest "${found#* }"',
            self.try_start(launch),
        ]
