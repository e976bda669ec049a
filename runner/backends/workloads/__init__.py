"""Bring-your-own workloads: a user's training program run in every environment, its output parsed into
the result the store keeps (docs/workloads.md).

`config` reads and checks `workload:` (argv template, files, parser) and gives each environment its
`Workload`; `files` hashes, stages and packs its files; `arguments` is what a backend puts after
`python bench.pyz`: bench's own arguments for a bench cell, `workload SPEC` for a workload cell, which the
launcher in the zipapp (runner/bench/workload.py) runs and parses in the environment.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from runner.backends.workloads.config import Workload, arithmetic, text
from runner.backends.workloads.files import Changed, folder_name, manifest_digest
from runner.base.errors import ConfigError
from runner.domain.cells import Task

SPEC_VERSION = 1  # runner/bench/workload.py SPEC_VERSION reads it


def launcher_spec(task: Task, files_at: str | None) -> dict[str, Any]:
    """What the launcher needs for one repeat: the argv template, its values, where the files are, the
    params to record and the parser's configuration."""
    cell = task.cell
    workload = cell.workload
    assert isinstance(workload, Workload)
    settings = {"iterations": cell.run.iterations, "warmup": cell.run.warmup, "seed": cell.run.seed}
    values = {k: text(v) for k, v in cell.params.items()}
    # {repeat} counts 1..n, as `run` and `show` print repeats (the store's repeat index is 0-based).
    values.update({k: text(v) for k, v in settings.items()}, repeat=str(task.repeat + 1))
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


def adopted(workloads: Mapping[str, Any], template: str | None, names: Sequence[str], option: str) -> dict[str, Any]:
    """The workloads of environments made on the command line (run --image, bisect --images/--template):
    the template's, else the one workload every environment of the matrix runs; a ConfigError when the
    environments run different ones (the generated environment would not know which). Empty for bench."""
    if not workloads:
        return {}
    if template is not None:
        return {name: workloads[template] for name in names}
    distinct = {w.digest: w for w in workloads.values()}
    if len(distinct) != 1:
        raise ConfigError(f"{option}: the environments of this matrix run different workloads "
                          f"({', '.join(sorted(workloads))}); say which one the image runs: "
                          + ("bisect --images with --template ENVIRONMENT" if "images" in option else
                             "put the image in an environment of the matrix file"))
    (workload,) = distinct.values()
    return {name: workload for name in names}


__all__ = ["Changed", "Workload", "adopted", "arguments", "launcher_spec"]
