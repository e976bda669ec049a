"""What `matrix doctor` says about Slurm here, and what `matrix clean` cancels."""

from __future__ import annotations

import shutil

from runner.backends.base import Probe
from runner.backends.containers import host as runtimes
from runner.backends.slurm.commands import scancel, slurm
from runner.base.errors import BackendError


def doctor() -> list[Probe]:
    if not any(shutil.which(c) for c in ("sbatch", "sinfo", "sacct")):
        return [Probe("slurm client", None, "sbatch/sinfo/sacct not on PATH: no Slurm here "
                      "(needed only for slurm environments; `make services` starts a one-node Slurm)"),
                *runtimes.doctor()]
    checks = [Probe(c, bool(shutil.which(c)), shutil.which(c) or "not on PATH: install slurm-client")
              for c in ("sbatch", "sacct")]
    for name, args, what in (
        ("sinfo", ["sinfo", "-h", "-o", "%P %a %D %t"], "partitions"),
        ("accounting (sacct)", ["sacct", "-n", "-X", "-S", "now", "-E", "now", "--format=JobID"], ""),
    ):
        try:
            proc = slurm(args, timeout=20)
            detail = "; ".join(ln.strip() for ln in proc.stdout.splitlines()[:6] if ln.strip())
            checks.append(Probe(name, True, f"{what}: {detail}" if what else "answers"))
        except BackendError as e:
            checks.append(Probe(name, False, str(e)))
    return checks + runtimes.doctor()


def clean(run_id: str | None = None) -> list[str]:
    """scancel the jobs of one run (found by their comment); without a run id nothing is touched,
    since jobs left running on purpose are collected later."""
    if not run_id or shutil.which("squeue") is None:
        return []
    try:
        proc = slurm(["squeue", "-h", "--me", "-o", "%F|%k"], timeout=30)
    except BackendError:
        return []
    jobs = sorted({line.split("|", 1)[0] for line in proc.stdout.splitlines()
                   if line.split("|", 1)[-1] == f"matrix run {run_id}"})
    scancel(jobs)
    return [f"slurm job {job} (run {run_id})" for job in jobs]
