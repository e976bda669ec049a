"""A stored repeat travels typed (runner/record/stored.py `StoredRepeat`, built once in `Store.rows()`): no function
above the store takes or returns one as a dict read by string. Three scans of runner/ (the store itself, the benchmark
and the record's own module excepted), each shown to catch what it forbids on a planted module, and the runtime
boundary: the frame refuses a dict, the store yields the record with read-only documents."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from runner.analysis import StoredRepeat, frame
from runner.record.stored import Document

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "runner"
# The store reads and writes its rows (and the exchange file's records, a file format); the record's own module holds
# the one constructor from a mapping; the benchmark runs alone in old Pythons and knows nothing of the store.
EXEMPT = ("runner/store/", "runner/bench/", "runner/record/stored.py")
LOOSE = re.compile(r"\b(dict|Mapping|MutableMapping)\[str, (Any|object)\]")
REPEAT_NAME = re.compile(r"^(row|rows|repeat|repeats|stored|stored_rows)$")
REPEAT_FUNCTION = re.compile(r"(^|_)(rows|repeats|stored)($|_)")
# Names that say repeat but hold something else, each with what it is (an entry that no longer exists fails too).
NOT_REPEATS = {
    "runner/commands/ls.py:imports_table:rows": "the `imported` table's summary, one row per origin store and file",
    "runner/domain/cellmatch.py:matches:row": "a cell's params and environment, matched against a rule",
    "runner/report/grid.py:per_step_rows:->": "the summary's records of one block of the precision grid",
    "runner/analysis/history.py:_name_rows:->": "the history's output rows, one per point",
    "runner/kit/goals.py:best:rows": "the evidence page's numbers of one table (evidence.json), one per row",
    "runner/kit/goals.py:best:->": "one of those rows",
    "runner/kit/goals.py:family:rows": "the same evidence rows, counted for the goals' family of choices",
}
# A stored repeat's JSON documents and identity, as a dict read by string would name them.
DOCUMENTS = {"metrics", "env", "raw", "params", "capture_id", "log_tail"}
IDENTITY = {"cell_key", "run_id", "repeat", "status"}


def modules(root: Path = ROOT) -> dict[str, ast.Module]:
    out = {}
    for p in sorted((root / "runner").rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if not rel.startswith(EXEMPT):
            out[rel] = ast.parse(p.read_text(), rel)
    return out


def functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def loose_annotations(trees: dict[str, ast.Module]) -> dict[str, str]:
    """Every parameter or return annotated as a loose document (dict or Mapping of str to Any, in any container)
    whose name says it is a repeat (a return: the function's name, or a parameter of it that is one):
    'path:function:parameter' ('->' for a return) -> the annotation."""
    found = {}
    for rel, tree in trees.items():
        for fn in functions(tree):
            a = fn.args
            takes = False
            for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]:
                text = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if LOOSE.search(text) and REPEAT_NAME.match(arg.arg):
                    found[f"{rel}:{fn.name}:{arg.arg}"] = text
                    takes = True
            text = ast.unparse(fn.returns) if fn.returns is not None else ""
            if LOOSE.search(text) and (takes or REPEAT_FUNCTION.search(fn.name)):
                found[f"{rel}:{fn.name}:->"] = text
    return found


def handles_repeats(tree: ast.Module) -> bool:
    """A module that reads the store's repeats (`store.rows(...)`) or takes the typed record."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module in ("runner.record.stored", "runner.record.repeat")
                                                 or any(a.name in ("StoredRepeat", "Repeat", "admitted")
                                                        for a in node.names)):
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "rows"
                and "store" in ast.unparse(node.func.value)):
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("StoredRepeat", "Repeat", "admitted"):
            return True
    return False


def string_reads(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """In modules that handle repeats, the parameters and loop variables of a function (what a row arrives as) read
    by string both for one of a stored repeat's documents and for one of its identity columns (`r["metrics"]` beside
    `r["status"]`, `.get(...)` alike): 'path:function:variable' -> the keys read."""
    found = {}
    for rel, tree in trees.items():
        if not handles_repeats(tree):
            continue
        for fn in functions(tree):
            a = fn.args
            arrivals = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
            for node in ast.walk(fn):
                if isinstance(node, ast.For | ast.comprehension):
                    arrivals |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
            keys: dict[str, set[str]] = {}
            for node in ast.walk(fn):
                name, key = None, None
                if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
                    index = node.slice
                    if isinstance(index, ast.Constant) and isinstance(index.value, str):
                        name, key = node.value.id, index.value
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                      and isinstance(node.func.value, ast.Name) and node.args
                      and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                    name, key = node.func.value.id, node.args[0].value
                if name in arrivals and key is not None:
                    keys.setdefault(name, set()).add(key)
            for name, seen in keys.items():
                if seen & DOCUMENTS and seen & IDENTITY:
                    found[f"{rel}:{fn.name}:{name}"] = seen & (DOCUMENTS | IDENTITY)
    return found


def constructions(trees: dict[str, ast.Module]) -> list[str]:
    """Where runner/ makes a repeat from a mapping (`StoredRepeat.of`, `.many`)."""
    return [f"{rel}:{node.lineno}" for rel, tree in trees.items() for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("of", "many")
            and ast.unparse(node.value).endswith("StoredRepeat")]


def test_no_function_takes_or_returns_a_repeat_as_a_loose_dict() -> None:
    found = loose_annotations(modules())
    assert {k: v for k, v in found.items() if k not in NOT_REPEATS} == {}
    assert sorted(k for k in NOT_REPEATS if k not in found) == [], "an exception that no longer exists: remove it"


def test_no_function_reads_a_repeat_by_string() -> None:
    assert string_reads(modules()) == {}


def test_a_mapping_becomes_a_repeat_only_where_the_store_reads_or_a_file_is_checked() -> None:
    """`StoredRepeat.of` is for tests' fixtures and an import's checks of a file's records (runner/store/, exempt
    here): nothing else above the store builds one from a dict."""
    assert constructions(modules()) == []


PLANTED = '''
from typing import Any, Iterator, Mapping
from runner.record.stored import StoredRepeat

def newest(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows

def stored_rows(store: Any) -> Iterator[Mapping[str, Any]]:
    return iter(store.rows())

def note(row: Any) -> str:
    return str(row["status"]) + str(row.get("metrics"))

def again(thing: Any) -> StoredRepeat:
    return StoredRepeat.of(thing)
'''


def test_each_scan_catches_what_it_forbids(tmp_path: Path) -> None:
    """The scans are not vacuous: a planted module that passes repeats as dicts, reads one by string and builds one
    from a mapping is caught by each of them."""
    (tmp_path / "runner" / "report").mkdir(parents=True)
    (tmp_path / "runner" / "report" / "planted.py").write_text(PLANTED)
    trees = modules(tmp_path)
    assert set(loose_annotations(trees)) == {"runner/report/planted.py:newest:rows",
                                             "runner/report/planted.py:newest:->",
                                             "runner/report/planted.py:stored_rows:->"}
    assert string_reads(trees) == {"runner/report/planted.py:note:row": {"status", "metrics"}}
    assert constructions(trees) == ["runner/report/planted.py:15"]


def test_the_frame_refuses_a_dict_and_takes_the_typed_record() -> None:
    row = {"id": 3, "run_id": "r", "cell_key": "k", "status": "ok", "params": {"model": "m"},
           "metrics": {"throughput": 10.0, "window_s": 1.0}}
    with pytest.raises(TypeError, match=r"StoredRepeat\.of"):
        frame([row])
    df = frame([StoredRepeat.of(row)])
    assert list(df["throughput"]) == [10.0] and list(df["id"]) == [3]


def test_a_stored_repeats_documents_are_read_only() -> None:
    rep = StoredRepeat.of({"status": "ok", "metrics": {"throughput": 10.0}, "raw": {"params": {}}})
    assert isinstance(rep.metrics, Document) and isinstance(rep.metrics, dict)
    with pytest.raises(TypeError, match="read-only"):
        rep.metrics["throughput"] = 20.0  # type: ignore[index]
    with pytest.raises(TypeError, match="read-only"):
        rep.raw.update(params=None)  # type: ignore[union-attr]
    assert rep.metrics["throughput"] == 10.0 and dict(rep.metrics) == {"throughput": 10.0}
