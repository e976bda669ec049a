"""What was submitted and not yet collected: kept in the result store (table batch_jobs), so a later
`matrix run` or `matrix collect` against the same --db finds the jobs that an earlier, interrupted
or `--no-wait` run left running, whatever its --workdir was."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.errors import BackendError
from runner.spec import Task
from runner.store import BatchJob, BatchJobs

BACKEND = "slurm"
LEGACY_SCHEMA = 1  # <workdir>/slurm/submitted.json, where matrix 0.1 kept this


def state_key(task: Task) -> str:
    return f"{task.cell.env_name}\t{task.cell.key}\t{task.repeat}"


@dataclass
class Watched:
    """A submitted array task the controller waits for."""

    task: Task
    key: str
    job: str
    index: int
    results_dir: Path
    submitted_at: float
    run_id: str
    started: bool = False
    finished_seen: float | None = None
    pending_reason: str | None = None
    blocked_since: float | None = None

    @property
    def job_id(self) -> str:
        return f"{self.job}_{self.index}"

    @classmethod
    def from_record(cls, task: Task, key: str, rec: BatchJob) -> Watched:
        return cls(task, key, rec.job, rec.index, Path(rec.results_dir), rec.submitted_at, rec.run_id)

    def record(self) -> BatchJob:
        return BatchJob(self.key, self.task.id, self.run_id, self.job, self.index, str(self.results_dir),
                        self.submitted_at)


class SubmittedJobs:
    """The slurm rows of the store's batch_jobs table."""

    def __init__(self, store: BatchJobs | None) -> None:
        self.store = store

    def _store(self) -> BatchJobs:
        if self.store is None:
            raise BackendError("the slurm backend keeps what it submitted in the result store: "
                               "RunContext.store must be set")
        return self.store

    def load(self) -> dict[str, BatchJob]:
        return self._store().open_jobs(BACKEND)

    def add(self, watched: Sequence[Watched]) -> None:
        self._store().add_jobs(BACKEND, [w.record() for w in watched])

    def remove(self, keys: Sequence[str], how: str = "collected") -> None:
        self._store().close_jobs(BACKEND, keys, how)

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
