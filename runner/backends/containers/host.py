"""Which container runtimes `matrix doctor` finds on this host (the login node: the nodes may differ, and
each job checks its own nodes before its ranks start)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess

from runner.backends.base import Probe

# (check name, command, how it says its version, what it is for)
FOUND = (
    ("apptainer", ("apptainer", "singularity"), ["--version"], "container: {runtime: apptainer}"),
    ("podman", ("podman",), ["--version"], "container: {runtime: podman}, and engine: podman"),
    ("charliecloud", ("ch-run",), ["--version"], "container: {runtime: charliecloud}"),
)


def doctor() -> list[Probe]:
    checks = []
    for name, commands, args, what in FOUND:
        path = next((p for p in (shutil.which(c) for c in commands) if p), None)
        if path is None:
            checks.append(Probe(f"runtime {name}", None, f"{' or '.join(commands)} not on PATH here (needed on "
                                                          f"the nodes for {what})"))
            continue
        checks.append(Probe(f"runtime {name}", True, f"{_version(path, args)} ({path})"))
    checks.append(_pyxis())
    return checks


def _version(path: str, args: list[str]) -> str:
    try:
        # ch-run refuses to start without USER, which a bare root shell or sudo may not set.
        env = {**os.environ, "USER": os.environ.get("USER") or pwd.getpwuid(os.getuid()).pw_name}
        proc = subprocess.run([path, *args], capture_output=True, text=True, timeout=20, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"version unknown ({e})"
    return ((proc.stdout or proc.stderr).strip().splitlines() or ["version unknown"])[0]


def _pyxis() -> Probe:
    """Pyxis is two pieces: srun's plugin (an option of srun) and enroot on the nodes."""
    srun, enroot = shutil.which("srun"), shutil.which("enroot")
    plugin = False
    if srun is not None:
        try:
            plugin = "--container-image" in subprocess.run([srun, "--help"], capture_output=True, text=True,
                                                          timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            plugin = False
    if plugin and enroot:
        return Probe("runtime pyxis", True, f"srun has --container-image; enroot {_version(enroot, ['version'])}")
    missing = [what for what, ok in (("srun's pyxis plugin (no --container-image)", plugin),
                                     ("enroot", enroot is not None)) if not ok]
    return Probe("runtime pyxis", None, f"{' and '.join(missing)} not here (needed for container: {{runtime: "
                                        "pyxis}; the nodes may differ)")
