"""The slurm backend, one concern a module:

- `config`: what a slurm environment says in matrix.yaml;
- `script`: the batch script of one job array, rendered from templates/slurm.sh.j2;
- `commands`: every Slurm command, through one function (`commands.slurm`);
- `pending`: why a job pends, and which reasons never clear;
- `state`: what was submitted and not yet collected (in the result store);
- `task_outcomes`: a finished array task's outcome, from its files or its Slurm state;
- `backend`: `SlurmBackend`, submit, poll, collect, cancel;
- `host`: `matrix doctor` and `matrix clean` for Slurm.
"""

from __future__ import annotations

from runner.backends.slurm.backend import SlurmBackend
from runner.backends.slurm.config import SlurmEnvironment

__all__ = ["SlurmBackend", "SlurmEnvironment"]
