"""`workload:` in matrix.yaml: a user's own program instead of bench, its files and the parser of its output.

A workload is a definition like an image or an environment variable: its argv template, its parser's
configuration and the content hashes of its files are part of each cell's key (`Workload.identity`), so
a changed script is a new definition and is never pooled with the old one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, field_validator

from runner.backends.workloads import parse_settings as parsers
from runner.backends.workloads.figures import arithmetic, placeholders
from runner.backends.workloads.files import FileEntry, scan
from runner.backends.workloads.parse_settings import ParserSpec, message, parser_config
from runner.domain.cells import Strict, stable_hash

__all__ = ["BUILTIN_PLACEHOLDERS", "ParserSpec", "Workload", "WorkloadSpec", "arithmetic", "merged", "parser_config",
           "placeholders", "resolve", "text"]

# Placeholders every workload may use besides the cell's axes; the launcher fills python and output in the
# environment, the backend says where files are.
BUILTIN_PLACEHOLDERS = ("python", "files", "output", "iterations", "warmup", "seed", "repeat")


class WorkloadSpec(Strict):
    name: str | None = None
    argv: list[str] = Field(min_length=1)
    files: list[str] = []
    parser: Any = Field(description="read by runner/backends/workloads/parse_settings.py into its kind's settings model")

    @field_validator("argv")
    @classmethod
    def _no_nul(cls, value: list[str]) -> list[str]:
        if any("\0" in a for a in value):
            raise ValueError("an argument cannot hold a NUL character")
        return value


def text(value: Any) -> str:
    """An axis value as the program receives it: booleans as YAML writes them, numbers as Python does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True)
class Workload:
    """One environment's effective workload, its files scanned (content hashes) when the matrix was read."""

    name: str | None
    argv: tuple[str, ...]
    files: tuple[FileEntry, ...]
    parser: Mapping[str, Any]

    def identity(self) -> dict[str, Any]:
        """What makes two workloads the same definition: argv template, parser, file contents."""
        return {"argv": list(self.argv), "parser": dict(self.parser),
                "files": {f.name: f.digest for f in self.files}}

    @property
    def digest(self) -> str:
        return stable_hash(self.identity())

    @property
    def files_digest(self) -> str:
        return stable_hash({f.name: f.digest for f in self.files})

    def uses(self) -> set[str]:
        names = {n for t in self.argv for n in placeholders(t)}
        if self.parser.get("file"):
            names |= set(placeholders(str(self.parser["file"])))
        if self.parser.get("items_per_step_text"):
            names |= set(placeholders(str(self.parser["items_per_step_text"])))
        return names

    def cell_problem(self, values: Mapping[str, Any]) -> str | None:
        """Why this workload cannot run with a cell's values (items_per_step of a word), or None."""
        template = self.parser.get("items_per_step_text")
        if template is None:
            return None
        try:
            arithmetic(str(template), {k: text(v) for k, v in values.items()})
        except ValueError as e:
            return str(e)
        return None


def merged(top: Any, own: Any) -> Any:
    """An environment's workload: its own keys over the matrix's (`argv` alone, say, for an image where the
    script lives elsewhere)."""
    if own is None:
        return top
    if isinstance(top, Mapping) and isinstance(own, Mapping):
        return {**top, **own}
    return own


def resolve(raw: Any, base: Path, axis_names: Sequence[str]) -> tuple[Workload | None, list[tuple[tuple[Any, ...], str]]]:
    """(the workload, []) or (None, [(field path inside `workload`, why), ...])."""
    found: list[tuple[tuple[Any, ...], str]] = []
    try:
        spec = WorkloadSpec.model_validate(raw)
    except ValidationError as e:
        found = [(tuple(err["loc"]), message(err, lambda _: WorkloadSpec)) for err in e.errors()]
        spec = None
    settings, wrong = parsers.validate(raw.get("parser")) if isinstance(raw, Mapping) and "parser" in raw else (None, [])
    found += [(("parser", *loc), why) for loc, why in wrong]
    if spec is None or settings is None:
        return None, found
    problems: list[tuple[tuple[Any, ...], str]] = []
    try:
        config = settings.config()
    except ValueError as e:
        return None, [(("parser",), str(e))]
    allowed = set(axis_names) | set(BUILTIN_PLACEHOLDERS)
    where: list[tuple[tuple[Any, ...], str]] = [(("argv", i), t) for i, t in enumerate(spec.argv)]
    where += [(("parser", name), template) for name, template in settings.templates()]
    for loc, template in where:
        try:
            names = placeholders(template)
        except ValueError as e:
            problems.append((loc, str(e)))
            continue
        for name in names:
            if name not in allowed:
                problems.append((loc, f"{{{name}}} is not an axis of this matrix or a placeholder matrix fills; "
                                      f"allowed: {', '.join(sorted(allowed))}"))
            elif name == "files" and not spec.files:
                problems.append((loc, "{files} names the folder of the workload's files, but it has no `files:`"))
    entries: list[FileEntry] = []
    for i, name in enumerate(spec.files):
        try:
            entries.append(scan(name, base))
        except ValueError as e:
            problems.append((("files", i), str(e)))
    names = [e.name for e in entries]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.append((("files",), f"two entries are placed as {dup!r} (files land under their own name)"))
    if problems:
        return None, problems
    return Workload(spec.name, tuple(spec.argv), tuple(entries), config), []
