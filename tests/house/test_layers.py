"""The house holds its shape: every import under runner/ points down the floors of docs/architecture.md (lazy and
type-checking imports counted), no two modules import each other round a circle, no module is over 450 lines and
no function over 80. The floors are read from FLOORS below; a module no floor names fails the test, so a new one is
placed on purpose."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "runner"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80

# Top to bottom (docs/architecture.md, "The layers, as built"): a module may import its own floor and the floors below.
# Each floor: module name prefixes (a package prefix covers its modules).
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    ("kit", ("runner.kit",)),
    ("cli", ("runner.cli",)),
    ("commands", ("runner.commands",)),
    ("clients", ("runner.publish", "runner.bisect")),
    ("execution", ("runner.execution",)),
    ("report", ("runner.report",)),
    ("matrix", ("runner.matrix",)),
    ("analysis", ("runner.analysis",)),
    ("backends", ("runner.backends",)),
    ("store", ("runner.store",)),
    ("record", ("runner.record",)),
    ("domain", ("runner.domain",)),
    ("base", ("runner.base", "runner")),
    ("bench", ("runner.bench",)),
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(RUNNER.rglob("*.py"))}


def floor_of(name: str) -> int:
    """The index of the floor (0: the top) whose longest prefix names the module."""
    best, where = -1, -1
    for i, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best:
                best, where = len(prefix), i
    return where


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The runner modules `name` imports, wherever the import sits (a function body, `if TYPE_CHECKING:`)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name and t.startswith("runner"):
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


def test_every_module_has_a_floor() -> None:
    assert [n for n in modules() if floor_of(n) < 0] == []


def climbing(g: dict[str, set[str]]) -> list[str]:
    """Each import of `g` that runs up a floor, in words."""
    upward = []
    for name, targets in g.items():
        if name == "runner":
            continue
        for t in targets:
            if t != "runner" and floor_of(t) < floor_of(name):
                upward.append(f"{name} ({FLOORS[floor_of(name)][0]}) imports {t} ({FLOORS[floor_of(t)][0]})")
    return upward


def test_no_import_climbs_a_floor() -> None:
    assert climbing(graph()) == []


def test_the_store_stands_on_the_record_not_on_the_statistics() -> None:
    """The record is below the store and the statistics above it: the store importing the frame, or the record
    importing the store or the statistics, is a climb the test names."""
    g = {"runner.store.results": {"runner.record.stored", "runner.analysis.frame"},
         "runner.record.stored": {"runner.record.admission", "runner.store.db"},
         "runner.analysis.frame": {"runner.record.stored", "runner.store"}}
    assert sorted(climbing(g)) == ["runner.record.stored (record) imports runner.store.db (store)",
                                   "runner.store.results (store) imports runner.analysis.frame (analysis)"]


def test_the_record_needs_the_standard_library_only() -> None:
    """runner/record/ is read by every command, the store included: no third-party package (pandas, scipy, numpy,
    pydantic) is imported there, lazily or not."""
    third = []
    for name, path in modules().items():
        if not name.startswith("runner.record"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            found = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            third += [f"{name} imports {m}" for m in found
                      if m.split(".")[0] not in sys.stdlib_module_names and m.split(".")[0] != "runner"]
    assert third == []


# SQL in a string: a query, a write, a schema change or a pragma (a word in a sentence is none of these).
SQL = re.compile(r"\b(SELECT\b[\s\S]*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
                 r"CREATE\s+(TABLE|INDEX|VIEW)|DROP\s+TABLE|PRAGMA\s+\w+)\b")


def speaks_sql(name: str, source: str) -> list[str]:
    """Where a module imports the database driver or holds SQL in a string, in words."""
    found = []
    tree = ast.parse(source)
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) else []
        found += [f"{name}:{node.lineno} imports {n}" for n in names if n.split(".")[0] == "sqlite3"]
        if isinstance(node, ast.JoinedStr):  # an f-string: its text with each field as {}
            text = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in parts:
            text = node.value
        else:
            continue
        if SQL.search(str(text)):
            found.append(f"{name}:{node.lineno} holds SQL {text[:60]!r}")
    return found


def test_only_the_store_speaks_sql() -> None:
    """runner/store/ is the one way into the database: every other module reads and writes through its methods,
    never with the driver or a query of its own (positional columns that the next schema breaks)."""
    assert [f for name, path in modules().items() if not name.startswith("runner.store")
            for f in speaks_sql(name, path.read_text())] == []
    assert speaks_sql("load", 'import sqlite3\nq = f"SELECT id, {x} FROM results"\nw = "INSERT INTO runs VALUES (?)"') \
        == ["load:1 imports sqlite3", "load:2 holds SQL 'SELECT id, {} FROM results'", "load:3 holds SQL 'INSERT INTO runs VALUES (?)'"]
    assert speaks_sql("words", '"select the rows from a run, then update the table"') == []


def test_the_command_line_imports_only_the_commands_and_the_base() -> None:
    """runner/cli/ declares options: what it names comes from runner/commands/ (the commands, their defaults) and
    runner/base/ (errors, exit statuses, the console), never from the floors the commands stand on."""
    other = [f"{n} imports {t}" for n, ts in graph().items() if n.startswith("runner.cli") for t in ts
             if not t.startswith(("runner.cli", "runner.commands", "runner.base"))]
    assert other == []


def test_the_benchmark_imports_nothing_of_the_controller() -> None:
    """runner/bench/ runs alone inside every environment (Python 3.6, torch): it ships as one zipapp."""
    leaks = [f"{n} imports {t}" for n, ts in graph().items() if n.startswith("runner.bench")
             for t in ts if not t.startswith("runner.bench")]
    assert leaks == []


def test_no_import_cycle() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan's strongly connected components, iterative enough for this graph
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for v in sorted(g):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_is_over_450_lines_and_no_function_over_80() -> None:
    big = [f"{p.relative_to(ROOT)}: {n} lines" for p in RUNNER.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES]
    long = []
    for p in RUNNER.rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno:
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert big == [] and long == []


def test_the_root_holds_floors_only() -> None:
    """A module's floor is its path: no loose module at runner/'s root, every folder there a floor (or data)."""
    loose = [p.name for p in RUNNER.glob("*.py") if p.name != "__init__.py"]
    folders = {p.name for p in RUNNER.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
    named = {prefix.split(".")[1] for _, prefixes in FLOORS for prefix in prefixes if prefix != "runner"}
    assert loose == [] and folders <= named, (loose, folders - named)
