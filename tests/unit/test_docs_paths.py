"""The docs name only modules that exist: every `runner/...` path in README.md and docs/*.md, and every module a doc
names in backticks by its file name (`adaptive.py`, `formats/base.py`), is a file or folder of the repository. A
placeholder (`runner/commands/NAME.py`) and a module a recipe would add (`e.g. runner/backends/pbs.py`) are not
names of modules, and say so."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER_PATH = re.compile(r"(?<![\w/.-])runner/[\w./-]*\w")
MODULE = re.compile(r"`([\w/]+\.py)`")
PLACEHOLDER = re.compile(r"(?<![A-Z])(NAME|KIND)(?![A-Z])")
EXAMPLE = re.compile(r"e\.g\. `?$")  # "1. A module, e.g. `runner/commands/energy.py`": what a recipe would add
USERS = {"train.py"}  # a user's training program (README: "a `train.py`"), not a module of the project


def named(text: str) -> list[tuple[int, str, bool]]:
    """Each (line, path, whether it is a full `runner/` path) a doc names, placeholders and examples left out."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, full in ((RUNNER_PATH, True), (MODULE, False)):
            for m in pattern.finditer(line):
                path = m.group(1) if m.groups() else m.group(0)
                if full is False and path.startswith("runner/"):
                    continue  # a full path: RUNNER_PATH judges it
                if PLACEHOLDER.search(path) or EXAMPLE.search(line[:m.start()]) or path in USERS:
                    continue
                found.append((n, path, full))
    return found


def missing(text: str, files: set[str]) -> list[str]:
    """What a doc names that is not in `files` (the repository's paths, folders included): a full path by itself,
    a file name by the end of a path."""
    out = []
    for n, path, full in named(text):
        there = path.rstrip("/") in files if full else any(f == path or f.endswith("/" + path) for f in files)
        if not there:
            out.append(f"{n}: {path}")
    return out


def repository() -> set[str]:
    tops = ("runner", "tests", "benchmarks", "examples", "images", "scripts", "docs", "reports")
    paths = {str(p.relative_to(ROOT)) for top in tops if (ROOT / top).exists() for p in (ROOT / top).rglob("*")
             if "__pycache__" not in p.parts}
    return paths | {p.name for p in ROOT.iterdir()}


def test_the_docs_name_only_modules_that_exist() -> None:
    files = repository()
    gone = {str(doc.relative_to(ROOT)): m for doc in DOCS if (m := missing(doc.read_text(), files))}
    assert gone == {}


def test_a_moved_module_is_found() -> None:
    files = {"runner", "runner/analysis", "runner/analysis/adaptive.py", "runner/execution/adaptive_rounds.py"}
    text = ("The rule (`runner/analysis/adaptive.py`, `adaptive.py`) and the rounds (`runner/analysis/adaptive_schedule"
            ".py`, `adaptive_schedule.py`, `decide/schedule.py`);\n"
            "1. A module, e.g. `runner/commands/energy.py`; each command is `runner/commands/NAME.py`.")
    assert missing(text, files) == ["1: runner/analysis/adaptive_schedule.py", "1: adaptive_schedule.py",
                                    "1: decide/schedule.py"]
