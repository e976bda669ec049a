"""The command line a person expects: a usage error is one line and exit 2, help names values by what they are and
wraps its paragraphs to the terminal, MATRIX_DB and MATRIX_FILE stand for --db and -m, and a typo in a run id is a
usage error (2), not a broken store (6)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner import cli
from runner import matrix as matrix_mod
from runner.commands.base import COMMANDS

NAMES = sorted(c.name for c in cli.app.registered_commands if c.name)


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "200", **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.mark.parametrize(("args", "says"), [
    (["run", "--bogus"], "error: No such option: --bogus"),
    (["compare", "a"], "error: Missing argument 'B'"),
    (["plan", "--max-cells", "0"], "error: Invalid value for '--max-cells'"),
    (["plan", "--max-cells", "many"], "error: Invalid value for '--max-cells'"),
    (["nosuch"], "error: No such command 'nosuch'"),
])
def test_a_usage_error_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    code, out = invoke(*args)
    assert code == 2, out
    assert out.startswith(says) and out.count("\n") == 1, out
    assert "--help` lists what it takes" in out and not re.search("[╭│╰]", out)


@pytest.mark.parametrize("name", NAMES)
def test_help_names_values_by_what_they_are(name: str) -> None:
    code, out = invoke(name, "--help")
    assert code == 0, out
    assert not re.search(r"<(bool|str|int|float|path|list\[)", out), out
    for flag in ("--help",):
        assert re.search(rf"{flag}\s+Show this message", out), out


def test_help_paragraphs_wrap_to_the_terminal_not_to_the_source() -> None:
    """A docstring's line breaks made short and ragged lines; at 200 columns a paragraph is one line (the installed
    command in a process of its own, as a terminal of 200 columns runs it)."""
    done = subprocess.run([str(Path(sys.executable).parent / "matrix"), "collect", "--help"], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "200"}, timeout=60)
    code, out = done.returncode, done.stdout
    assert code == 0
    line = " ".join(COMMANDS.get("collect").help.split())
    assert line in out, out
    code, out = invoke("--help")
    assert re.search(r"^  bisect\s+Find the adjacent pair of environments", out, re.M), out
    assert "A change of status counts too" not in out  # the list shows the first sentence only


def test_matrix_db_and_matrix_file_stand_for_db_and_m(tmp_path: Path) -> None:
    from tests.report.conftest import fill_store, load_results

    db = fill_store(tmp_path / "daily.db", load_results())
    code, out = invoke("ls", env={"MATRIX_DB": str(db)})
    assert code == 0 and f"runs in {db}" in out, out
    code, out = invoke("ls", "--db", str(tmp_path / "none.db"), env={"MATRIX_DB": str(db)})
    assert code == 6 and "none.db" in out  # --db wins over the variable
    m = tmp_path / "m.yaml"
    m.write_text(Path(matrix_mod.DEFAULT_MATRIX).read_text().replace("name: quickstart", "name: from-the-variable"))
    code, out = invoke("plan", "--db", str(db), env={"MATRIX_FILE": str(m)})
    assert code == 0 and "from-the-variable" in out, out


def test_publish_reads_matrix_db_when_no_db_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.cli import boundary

    monkeypatch.setenv("MATRIX_DB", "/stores/daily.db")
    assert boundary.store_paths(None) == [Path("/stores/daily.db")]
    assert boundary.store_paths([Path("a.db"), Path("b.db")]) == [Path("a.db"), Path("b.db")]
    monkeypatch.delenv("MATRIX_DB")
    assert boundary.store_paths(None) is None  # the command's default, results/matrix.db


def test_a_typo_in_a_run_id_exits_2_and_lists_the_runs(tmp_path: Path) -> None:
    from tests.report.conftest import fill_store, load_results

    db = str(fill_store(tmp_path / "r.db", load_results()))
    for args in (["show", "nosuchrun"], ["export", "-o", str(tmp_path / "x.jsonl.gz"), "--run", "nosuchrun"],
                 ["clean", "--run", "nosuchrun"]):
        code, out = invoke(*args, "--db", db)
        assert code == 2 and "run 'nosuchrun' not found; recent runs:" in out and out.count("\n") == 1, (args, out)
