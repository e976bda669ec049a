"""What was submitted and not yet collected: kept in the result store (table batch_jobs), so a later
`matrix run` or `matrix collect` against the same --db finds the jobs that an earlier, interrupted
or `--no-wait` run left running, whatever its --workdir was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.backends.batch import SubmittedJobs, Watched, state_key
from runner.base.errors import BackendError
from runner.store import BatchJob, BatchJobs

BACKEND = "slurm"
LEGACY_SCHEMA = 1  # <workdir>/slurm/submitted.json, where matrix 0.1 kept this

__all__ = ["BACKEND", "SlurmJobs", "SubmittedJobs", "Watched", "state_key"]


class SlurmJobs(SubmittedJobs):
    """The slurm rows of the store's batch_jobs table, and those an older matrix kept in a file."""

    def __init__(self, store: BatchJobs | None) -> None:
        super().__init__(store, BACKEND)

    def import_legacy(self, path: Path) -> int:
        """Move what an older matrix kept in <workdir>/slurm/submitted.json into the store (once)."""
        try:
            data: Any = json.loads(path.read_text())
        except FileNotFoundError:
            return 0
        except (OSError, json.JSONDecodeError) as e:
            raise BackendError(f"{path} is not readable ({e}): move it away to forget what earlier "
                               "runs submitted (their jobs are then not collected)") from e
        if not isinstance(data, dict) or data.get("schema") != LEGACY_SCHEMA:
            raise BackendError(f"{path} has schema {data.get('schema') if isinstance(data, dict) else '?'}, "
                               f"this matrix reads {LEGACY_SCHEMA}: move the file away")
        tasks = dict(data.get("tasks") or {})
        self._store().add_jobs(BACKEND, [
            BatchJob(key, str(rec["task"]), str(rec.get("run_id", "")), str(rec["job"]), int(rec["index"]),
                     str(rec["results_dir"]), float(rec["submitted_at"])) for key, rec in tasks.items()])
        path.rename(path.with_name(path.name + ".imported"))
        return len(tasks)
