"""Batch jobs: tasks handed to a batch scheduler and not yet collected (runner/backends/batch.py)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from runner.store.db import Database, schema_refused
from runner.store.schema import JOBS_SCHEMA


@dataclass(frozen=True)
class BatchJob:
    """One array task of a batch scheduler, as `batch_jobs` keeps it."""

    task_key: str
    task_id: str
    run_id: str
    job: str
    index: int
    results_dir: str
    submitted_at: float



class BatchJobs(Database):
    def add_jobs(self, backend: str, jobs: Iterable[BatchJob]) -> None:
        """Remember submitted tasks; an open row of the same task is closed as superseded."""
        now = time.time()
        with self._tx():
            for j in jobs:
                self.db.execute("UPDATE batch_jobs SET closed_at=?, closed_how='superseded' WHERE backend=? "
                                "AND task_key=? AND closed_at IS NULL", (now, backend, j.task_key))
                self.db.execute(
                    "INSERT INTO batch_jobs (schema, backend, task_key, task_id, run_id, job, idx, results_dir,"
                    " submitted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (JOBS_SCHEMA, backend, j.task_key, j.task_id, j.run_id, j.job, j.index, j.results_dir,
                     j.submitted_at))

    def open_jobs(self, backend: str) -> dict[str, BatchJob]:
        """The tasks submitted and not yet collected, by task key."""
        found: dict[str, BatchJob] = {}
        with self._guard():
            if self.readonly and not self._has("batch_jobs"):
                return found
            for r in self.db.execute("SELECT * FROM batch_jobs WHERE backend=? AND closed_at IS NULL ORDER BY id",
                                     (backend,)):
                if r["schema"] != JOBS_SCHEMA:
                    raise schema_refused(self.path, f"holds {backend} jobs of", r["schema"], JOBS_SCHEMA,
                                         "collect them with the matrix version that submitted them")
                found[r["task_key"]] = BatchJob(r["task_key"], r["task_id"], r["run_id"], r["job"], r["idx"],
                                                r["results_dir"], r["submitted_at"])
        return found

    def open_task_ids(self) -> set[str]:
        """The task ids (`Task.id`) of every batch job not yet collected, whatever its backend."""
        with self._guard():
            if self.readonly and not self._has("batch_jobs"):
                return set()
            return {r[0] for r in self.db.execute("SELECT task_id FROM batch_jobs WHERE closed_at IS NULL")}

    def close_jobs(self, backend: str, keys: Iterable[str], how: str) -> None:
        """Mark tasks collected ("collected", "lost", "cancelled"): they are no longer waited for."""
        keys = list(keys)
        if not keys:
            return
        now = time.time()
        with self._tx():
            self.db.executemany("UPDATE batch_jobs SET closed_at=?, closed_how=? WHERE backend=? AND task_key=? "
                                "AND closed_at IS NULL", [(now, how, backend, k) for k in keys])

