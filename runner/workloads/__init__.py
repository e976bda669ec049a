"""Bring-your-own workloads: a user's training program run in every environment, its output parsed into
the result the store keeps (docs/workloads.md).

`spec` reads and checks `workload:` (argv template, files, parser) and gives each environment its
`Workload`; `files` hashes, stages and packs its files; `arguments` is what a backend puts after
`python bench.pyz`: bench's own arguments for a bench cell, `workload SPEC` for a workload cell, which the
launcher in the zipapp (runner/bench/workload.py) runs and parses in the environment.
"""

from __future__ import annotations

import json
from typing import Any

from runner.spec import Task
from runner.workloads.files import Changed, folder_name, manifest_digest
from runner.workloads.spec import Workload, arithmetic, text

SPEC_VERSION = 1  # runner/bench/workload.py SPEC_VERSION reads it


def launcher_spec(task: Task, files_at: str | None) -> dict[str, Any]:
    """What the launcher needs for one repeat: the argv template, its values, where the files are, the
    params to record and the parser's configuration."""
    cell = task.cell
    workload = cell.workload
    assert isinstance(workload, Workload)
    settings = {"iterations": cell.run.iterations, "warmup": cell.run.warmup, "seed": cell.run.seed}
    values = {k: text(v) for k, v in cell.params.items()}
    values.update({k: text(v) for k, v in settings.items()}, repeat=str(task.repeat))
    parser = dict(workload.parser)
    if parser.get("items_per_step_text") is not None:  # the cell's own count (checked when the matrix was read)
        parser["items_per_step"] = arithmetic(str(parser["items_per_step_text"]), values)
    return {"v": SPEC_VERSION, "name": workload.name, "argv": list(workload.argv), "values": values,
            "files": files_at if workload.files else None, "params": {**dict(cell.params), **settings},
            "parser": parser, "files_manifest": manifest_digest(workload.files) if workload.files else None}


def arguments(task: Task, files_parent: str | None = None) -> list[str]:
    """The words after `python bench.pyz`: bench's arguments, or `workload SPEC` with the files in
    files_parent/files-HASH (a path as the environment sees it)."""
    workload = task.cell.workload
    if workload is None:
        return task.bench_args()
    assert isinstance(workload, Workload)
    files_at = f"{files_parent.rstrip('/')}/{folder_name(workload.files)}" if files_parent and workload.files else None
    # One argument of ASCII JSON: no tab, newline or other control character, so a Slurm manifest carries it.
    return ["workload", json.dumps(launcher_spec(task, files_at), ensure_ascii=True, separators=(",", ":"))]


__all__ = ["Changed", "Workload", "arguments", "launcher_spec"]
