"""The docs name only modules that exist: every `runner/...` and `tests/...` path in README.md and docs/*.md, every
dotted name (`runner.backends.artifact`, `python -m runner.cli`) and every module a doc names in backticks by its
file name (`adaptive.py`, `formats/base.py`) is a file or folder of the repository (a dotted name may go on into what
the module defines). A placeholder (`runner/commands/NAME.py`) and a module a recipe would add (`e.g.
runner/backends/pbs.py`, and its dotted name in the recipe's registration line) are not names of modules, and say
so."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNER_PATH = re.compile(r"(?<![\w/.-])(?:runner|tests)/[\w./-]*\w")
MODULE = re.compile(r"`([\w/]+\.py)`")
DOTTED = re.compile(r"(?<![\w/.-])runner(?:\.[A-Za-z_]\w*)+")
PLACEHOLDER = re.compile(r"(?<![A-Z])(NAME|KIND)(?![A-Z])")
EXAMPLE = re.compile(r"e\.g\. `?$")  # "1. A module, e.g. `runner/commands/energy.py`": what a recipe would add
USERS = {"train.py"}  # a user's training program (README: "a `train.py`"), not a module of the project


def named(text: str) -> list[tuple[int, str, str]]:
    """Each (line, name, kind) a doc names, placeholders and examples left out; kind: `path` (a full `runner/`
    path), `file` (a file name, or the end of a path) or `dotted` (a module's dotted name)."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for pattern, kind in ((RUNNER_PATH, "path"), (MODULE, "file"), (DOTTED, "dotted")):
            for m in pattern.finditer(line):
                path = m.group(1) if m.groups() else m.group(0)
                if kind == "file" and path.startswith(("runner/", "tests/")):
                    continue  # a full path: RUNNER_PATH judges it
                if PLACEHOLDER.search(path) or EXAMPLE.search(line[:m.start()]) or path in USERS:
                    continue
                found.append((n, path, kind))
    return found


def examples(text: str) -> set[str]:
    """The dotted names of the modules a recipe would add (`e.g. runner/backends/pbs.py`: runner.backends.pbs)."""
    return {m.group(0).removesuffix(".py").replace("/", ".") for line in text.splitlines()
            for m in RUNNER_PATH.finditer(line) if EXAMPLE.search(line[:m.start()])}


def dotted_exists(name: str, files: set[str]) -> bool:
    """A package, a module, or a module and what it defines (`runner.store.db.Store`)."""
    parts = name.split(".")
    return "/".join(parts) in files or any("/".join(parts[:i]) + ".py" in files for i in range(len(parts), 0, -1))


def missing(text: str, files: set[str]) -> list[str]:
    """What a doc names that is not in `files` (the repository's paths, folders included): a full path by itself,
    a file name by the end of a path, a dotted name by its module."""
    out = []
    recipes = examples(text)
    for n, path, kind in named(text):
        if kind == "path":
            there = path.rstrip("/") in files
        elif kind == "file":
            there = any(f == path or f.endswith("/" + path) for f in files)
        else:
            there = path in recipes or dotted_exists(path, files)
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
    tests = {"tests", "tests/analysis", "tests/analysis/test_gate.py"}
    assert missing("`tests/analysis/test_gate.py`, not `tests/decide/test_gate.py` (tests/decide/)", tests) == [
        "1: tests/decide/test_gate.py", "1: tests/decide"]


def test_a_dotted_name_is_found_by_its_module() -> None:
    files = {"runner", "runner/cli", "runner/cli/__init__.py", "runner/store", "runner/store/__init__.py",
             "runner/store/db.py", "runner/backends", "runner/backends/__init__.py"}
    text = ("`python -m runner.cli` and `runner.store`, `runner.store.db.Store`;\n"
            "`runner.spec.cells` and `runner.store.results` and `runner.store.db.x.y` are gone.\n"
            "1. A module, e.g. `runner/backends/pbs.py`:\n"
            '2. One line in `MODULES`: `"pbs": "runner.backends.pbs"`, and `runner.backends.slurm`.')
    assert missing(text, files) == ["2: runner.spec.cells", "2: runner.store.results", "4: runner.backends.slurm"]
