"""One module name per meaning (docs/architecture.md, "Names"): no two modules under runner/ share a file name, and
no public class name is defined in two modules, unless the name means the same thing in each place; those are listed
below, each with its reason. A module under runner/commands/ is named for the command it implements and one under
runner/report/viewset/ for the view it builds, so their names may repeat the module that does the work
(commands/compare.py calls analysis/compare.py); `__init__.py` and `__main__.py` are Python's names.

And tests/ mirrors the floors: a folder of tests is named for the runner/ folder it tests (tests/store/ tests
runner/store/, tests/backends/slurm/ tests runner/backends/slurm/), except the folders OWN_FOLDERS lists with their
reason; a folder without tests (golden files, fixtures, scripts a test runs) is data beside the tests that read it.
Each folder of tests is a package, so two test files of one name in two folders never collide."""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "runner"
TESTS = ROOT / "tests"

NAMED_FOR_THEIR_COMMAND_OR_VIEW = ("runner/commands/", "runner/report/viewset/")
PYTHONS_NAMES = {"__init__.py", "__main__.py"}

# A file name several modules share on purpose: the modules that share it, and the one meaning it has in each.
SHARED_NAMES: dict[str, tuple[frozenset[str], str]] = {
    "base.py": (frozenset({"runner/backends/base.py", "runner/backends/containers/base.py",
                           "runner/report/formats/base.py"}),
                "the interface the package's plug-ins implement (a backend, a container runtime, a report format)"),
    "backend.py": (frozenset({"runner/backends/docker/backend.py", "runner/backends/slurm/backend.py"}),
                   "a backend package's Backend class"),
    "config.py": (frozenset({"runner/backends/docker/config.py", "runner/backends/slurm/config.py",
                             "runner/backends/containers/config.py", "runner/backends/workloads/config.py"}),
                  "what the part's section of matrix.yaml says, validated without the part installed"),
    "host.py": (frozenset({"runner/backends/docker/host.py", "runner/backends/slurm/host.py",
                           "runner/backends/containers/host.py"}),
                "what `matrix doctor` finds of the part on this host (and what `matrix clean` removes)"),
    "errors.py": (frozenset({"runner/base/errors.py", "runner/bench/errors.py"}),
                  "how a run goes wrong; bench runs alone inside old images and imports nothing of runner outside "
                  "runner/bench/, so it keeps its own"),
}

# A public class name several modules define on purpose: the modules, and why. None today.
SHARED_CLASSES: dict[str, tuple[frozenset[str], str]] = {}

# A folder of tests that mirrors no folder of runner/, on purpose: why.
OWN_FOLDERS = {
    "house": "rules over the whole tree (the layers, these names, the docs' paths, the typed record's scans) and the "
             "scripts every install runs",
    "backends/eras": "the benchmark and `matrix run` in old PyTorch releases' images (images/recipes.py), through "
                     "the docker backend",
}


def counted(paths: Iterable[str]) -> list[str]:
    """The module paths the file-name rule counts."""
    return sorted(p for p in paths if Path(p).name not in PYTHONS_NAMES
                  and not p.startswith(NAMED_FOR_THEIR_COMMAND_OR_VIEW))


def shared(names: dict[str, list[str]], allowed: dict[str, tuple[frozenset[str], str]]) -> list[str]:
    """Each name two modules share that `allowed` does not list with exactly those modules, in words."""
    return [f"{name}: {', '.join(where)}" for name, where in sorted(names.items())
            if len(where) > 1 and (name not in allowed or allowed[name][0] != frozenset(where))]


def by_file_name(paths: Iterable[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for p in counted(paths):
        found[Path(p).name].append(p)
    return dict(found)


def by_class_name(sources: dict[str, str]) -> dict[str, list[str]]:
    """Each public class name (no leading underscore) defined at a module's top level, and where."""
    found: dict[str, list[str]] = defaultdict(list)
    for path, text in sorted(sources.items()):
        for node in ast.parse(text, path).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found[node.name].append(path)
    return dict(found)


def modules() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted(RUNNER.rglob("*.py"))}


def test_no_two_modules_share_a_file_name() -> None:
    assert shared(by_file_name(modules()), SHARED_NAMES) == []


def test_no_two_modules_define_one_public_class_name() -> None:
    assert shared(by_class_name(modules()), SHARED_CLASSES) == []


def test_each_shared_name_is_still_shared_as_listed() -> None:
    """A listed name whose modules moved or went is a stale reason: the list says what the tree holds."""
    names, classes = by_file_name(modules()), by_class_name(modules())
    stale = [n for n, (where, _) in SHARED_NAMES.items() if frozenset(names.get(n, [])) != where]
    stale += [n for n, (where, _) in SHARED_CLASSES.items() if frozenset(classes.get(n, [])) != where]
    assert stale == []


def test_a_second_module_of_one_name_is_named() -> None:
    paths = ["runner/analysis/bisect.py", "runner/report/bisect.py", "runner/commands/bisect.py",
             "runner/report/viewset/history.py", "runner/analysis/history.py", "runner/kit/__init__.py",
             "runner/cli/__init__.py", "runner/backends/docker/host.py", "runner/backends/slurm/host.py",
             "runner/backends/local/host.py"]
    allowed = {"host.py": (frozenset({"runner/backends/docker/host.py", "runner/backends/slurm/host.py"}), "doctor")}
    assert shared(by_file_name(paths), allowed) == [
        "bisect.py: runner/analysis/bisect.py, runner/report/bisect.py",
        "host.py: runner/backends/docker/host.py, runner/backends/local/host.py, runner/backends/slurm/host.py"]


def test_a_class_name_defined_twice_is_named() -> None:
    sources = {"runner/record/admission.py": "class Check:\n    pass\nclass _Private:\n    pass\n",
               "runner/analysis/gate.py": "class Check:\n    pass\nclass _Private:\n    pass\n",
               "runner/backends/base.py": "class Probe:\n    def Check(self): pass\n"}
    assert shared(by_class_name(sources), {}) == ["Check: runner/analysis/gate.py, runner/record/admission.py"]


def folders_of_tests(test_files: Iterable[str]) -> list[str]:
    """The folders (relative to tests/) that hold test files."""
    return sorted({str(Path(f).parent) for f in test_files if Path(f).name.startswith("test_")} - {"."})


def unmirrored(folders: Iterable[str], runner_folders: set[str], own: Iterable[str] = OWN_FOLDERS) -> list[str]:
    """Each folder of tests that names no folder of runner/ and is not one of `own`."""
    return [f for f in folders if f not in runner_folders and f not in set(own)]


def tree_of_tests() -> tuple[list[str], set[str]]:
    files = [str(p.relative_to(TESTS)) for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]
    runner = {str(p.relative_to(RUNNER)) for p in RUNNER.rglob("*") if p.is_dir() and "__pycache__" not in p.parts}
    return folders_of_tests(files), runner


def test_each_folder_of_tests_is_named_for_a_folder_of_runner() -> None:
    folders, runner = tree_of_tests()
    assert unmirrored(folders, runner) == []
    assert sorted(set(OWN_FOLDERS) - set(folders)) == []  # a reason for a folder that went is stale


def test_each_folder_of_tests_is_a_package() -> None:
    folders, _ = tree_of_tests()
    assert [f for f in ["", *folders] if not (TESTS / f / "__init__.py").is_file()] == []


def test_a_folder_of_tests_named_for_no_floor_is_named() -> None:
    files = ["conftest.py", "store/test_store.py", "store/synthetic.py", "unit/test_layers.py", "core/test_gate.py",
             "backends/slurm/test_units.py", "backends/slurm/golden/x.sh", "backends/eras/test_era.py",
             "report/fixtures/make_results.py", "execution/scripts/steady.py"]
    runner = {"store", "backends", "backends/slurm", "report", "execution", "analysis"}
    assert unmirrored(folders_of_tests(files), runner, own={"backends/eras"}) == ["core", "unit"]
