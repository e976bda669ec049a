"""What a backend is lent by the run it serves: its id and folder, and typed hooks into the run (claim a task,
prepare it, say it started) and the store's batch jobs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runner.domain.cells import Task
from runner.store.jobs import BatchJobs


@dataclass
class RunContext:
    """What a backend needs to know about the run it serves."""

    run_id: str
    workdir: Path
    stop: threading.Event = field(default_factory=threading.Event)
    wait: bool = True     # False: submit (batch backends) and return without waiting
    back_later: bool = False  # with wait False: this same run comes back to collect (say so, not `collect`)
    submit: bool = True   # False: only collect what earlier runs submitted
    verbose: bool = False
    on_start: Callable[[Task], None] | None = None  # told when a task starts (the progress display)
    store: BatchJobs | None = None  # the run's result store: batch backends keep their jobs there
    claim: Callable[[Task], bool] | None = None  # claims the repeat in the store; False: another run has it
    prepare: Callable[[Task], Task] | None = None  # the task as it runs (its calibrated count), after its claim
