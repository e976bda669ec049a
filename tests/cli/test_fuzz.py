"""Fuzz: mutated example matrices through `matrix plan`, mutated store files through ls, show, compare and
report. Whatever the input, the answer is output or one error line with a status from runner/base/exitcodes.py,
never a traceback and never "internal error" (70). Derandomized and bounded, so CI stays fast and repeatable.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from runner import cli
from runner.base.exitcodes import Exit
from tests.report.conftest import fill_store, load_results

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml")) + [ROOT / "runner" / "examples" / "quickstart.yaml"]
TEXTS = {p.name: p.read_text() for p in EXAMPLES}
DATA = {name: yaml.safe_load(text) for name, text in TEXTS.items()}
FUZZ = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(result: Any, allowed: set[int]) -> None:
    """The promise: a status from the table (and from `allowed`), no traceback, errors as `error:` lines."""
    out = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{type(result.exception).__name__} escaped the CLI: {result.exception}\n{out}")
    assert result.exit_code in {int(e) for e in Exit} and result.exit_code in allowed, (result.exit_code, out)
    assert "Traceback" not in out and "internal error" not in out, out
    if result.exit_code not in (0, 1):
        assert out.startswith("error: "), out


# Matrices ---------------------------------------------------------------------------------------------
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**18, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["yes", "010", "1:30", "1.10", "~", "[/x]", "[red]", "=cmd()", "ünï©ødé ✓", "", "-1",
                     "0", "1e999", "fp8", "npz:", "all", "0,1", "10%", "-50%", "ten%", ">= 5", "5 ± 2%"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=8)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


def at(node: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        node = node[part]
    return node


@st.composite
def mutated_matrix(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(sorted(DATA)))
    data = copy.deepcopy(DATA[name])
    for _ in range(draw(st.integers(1, 4))):
        candidates = paths(data)[1:]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent, key = at(data, path[:-1]), path[-1]
        action = draw(st.sampled_from(["delete", "retype", "empty", "deep", "huge", "copy"]))
        if action == "delete":
            del parent[key]
        elif action == "retype":
            parent[key] = draw(VALUES)
        elif action == "empty":
            parent[key] = draw(st.sampled_from([[], {}, "", None]))
        elif action == "deep":
            deep: Any = draw(SCALARS)
            for _ in range(draw(st.integers(5, 60))):
                deep = [deep] if draw(st.booleans()) else {"k": deep}
            parent[key] = deep
        elif action == "huge":
            parent[key] = draw(st.sampled_from([10**30, -(10**30), 1e308, list(range(200))]))
        elif isinstance(parent, dict):  # copy: the same value under another (possibly existing) key
            parent[draw(st.sampled_from([*map(str, parent), "axes", "env", "name"]))] = copy.deepcopy(parent[key])
    text = yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    lines = text.splitlines(keepends=True)
    edit = draw(st.sampled_from(["none", "duplicate", "drop", "truncate", "bytes"]))
    if edit != "none" and lines:
        i = draw(st.integers(0, len(lines) - 1))
        if edit == "duplicate":  # a key given twice, or a list item twice
            lines.insert(i, lines[i])
        elif edit == "drop":
            del lines[i]
        elif edit == "truncate":
            lines = lines[:i] + [lines[i][: draw(st.integers(0, len(lines[i])))]]
        else:
            lines[i] = draw(st.text(min_size=1, max_size=20)) + lines[i]
    return "".join(lines)


@pytest.fixture(scope="module")
def workdir() -> Any:
    with tempfile.TemporaryDirectory(prefix="matrix-fuzz-") as d:
        yield Path(d)


@settings(FUZZ, max_examples=int(os.environ.get("MATRIX_FUZZ_EXAMPLES", "120")))
@given(text=mutated_matrix())
def test_plan_answers_every_mutated_matrix_with_a_table_or_one_error(workdir: Path, text: str) -> None:
    path = workdir / "m.yaml"
    path.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(cli.app, ["plan", "-m", str(path), "--db", str(workdir / "none.db")],
                                terminal_width=200)
    check(result, {0, 2})


def test_plan_in_a_real_process_on_hostile_files(tmp_path: Path) -> None:
    """A handful through the installed entry point: the boundary holds outside CliRunner too."""
    quick = TEXTS["quickstart.yaml"]
    cases = {
        "dup.yaml": quick + "axes:\n  batch_size: [8]\n",
        "empty.yaml": quick.replace("batch_size: [32, 64]", "batch_size: []"),
        "deep.yaml": "axes: " + "[" * 5000 + "]" * 5000 + "\n",
        "markup.yaml": quick.replace("name: local-cpu", "name: '[/x]'"),
        "binary.yaml": None,
    }
    for name, text in cases.items():
        path = tmp_path / name
        if text is None:
            path.write_bytes(b"\x00\xff\xfe garbage \x80")
        else:
            path.write_text(text)
        proc = subprocess.run([sys.executable, "-m", "runner.cli", "plan", "-m", str(path), "--db",
                               str(tmp_path / "none.db")], capture_output=True, text=True, timeout=120)
        out = proc.stdout + proc.stderr
        assert "Traceback" not in out, out
        assert proc.returncode == (0 if name == "markup.yaml" else 2), out
        if name == "markup.yaml":
            assert "[/x]" in proc.stdout
        else:
            assert proc.stderr.startswith("error: ") and proc.stdout == "", out


# Store files ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    db = fill_store(tmp_path_factory.mktemp("store") / "results.db", load_results())
    return db.read_bytes()


@st.composite
def mutated_store(draw: st.DrawFn, size: int) -> list[tuple[str, int, bytes]]:
    """A list of edits to the file: truncate at an offset, or write bytes at one."""
    edits = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "ascii", "ascii", "zero", "random", "truncate"]))
        # Mostly past the 100-byte header (which SQLite refuses at once): damaged pages and records.
        offset = draw(st.one_of(st.integers(100, size - 1), st.integers(100, size - 1), st.integers(0, 99)))
        if kind == "truncate":
            edits.append(("truncate", offset, b""))
        elif kind == "zero":
            edits.append(("write", offset, bytes(draw(st.integers(1, 512)))))
        elif kind == "random":
            edits.append(("write", offset, draw(st.binary(min_size=1, max_size=64))))
        elif kind == "ascii":  # still UTF-8: the damage reaches the JSON and the values, not only SQLite
            edits.append(("write", offset, draw(st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                        min_size=1, max_size=4)).encode()))
        else:
            edits.append(("xor", offset, bytes([draw(st.integers(1, 255))])))
    return edits


def apply(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    buf = bytearray(data)
    for kind, offset, payload in edits:
        offset = min(offset, len(buf))
        if kind == "truncate":
            del buf[offset:]
        elif kind == "write":
            buf[offset:offset + len(payload)] = payload
        elif offset < len(buf):
            buf[offset] ^= payload[0]
    return bytes(buf)


STORE_COMMANDS = (["ls"], ["show"], ["compare", "ngc-18.07", "cluster-pt041"],
                  ["compare", "ngc-18.07", "cluster-pt041", "--format", "csv"])


@settings(FUZZ, max_examples=int(os.environ.get("MATRIX_FUZZ_STORES", "30")))
@given(data=st.data())
def test_read_commands_answer_every_damaged_store_with_output_or_one_error(
        workdir: Path, store_bytes: bytes, data: st.DataObject) -> None:
    edits = data.draw(mutated_store(len(store_bytes)))
    db = workdir / "damaged.db"
    for leftover in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        leftover.unlink(missing_ok=True)
    db.write_bytes(apply(store_bytes, edits))
    os.chmod(db, 0o444)  # read-only commands: nothing may repair or rewrite the damaged file
    try:
        for command in STORE_COMMANDS:
            result = CliRunner().invoke(cli.app, [*command, "--db", str(db)], terminal_width=200)
            check(result, {0, 2, 6})
        out = workdir / "report"
        result = CliRunner().invoke(cli.app, ["report", "--db", str(db), "--format", "json", "--format", "csv",
                                              "--out", str(out)])
        check(result, {0, 2, 6})
        if result.exit_code == 0:
            json.loads((out / "report.json").read_text())
    finally:
        os.chmod(db, 0o644)
