"""Bad command-line input is one line and its exit status, printed as written (no console markup)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from runner import cli
from runner import matrix as matrix_mod

MATRIX = """
name: '[bold]odd[/bold]'
environments:
  - {name: '[red]cpu', backend: local, tags: ['[/x]']}
axes: {model: [mnist_cnn], batch_size: [16, 32], dataset: ['npz:[/data]']}
"""


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args), terminal_width=200)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    return result.exit_code, result.output


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    path = tmp_path / "[red]m.yaml"
    path.write_text(MATRIX)
    return path


def test_markup_in_names_values_and_paths_is_printed_as_written(odd: Path, tmp_path: Path) -> None:
    code, out = invoke("plan", "-m", str(odd), "--db", str(tmp_path / "none.db"))
    assert code == 0, out
    assert "[bold]odd[/bold]: 2 cells" in out and "[red]cpu" in out and "npz:[/data]" in out
    code, out = invoke("plan", "-m", str(odd), "--only", "model=[/x]")
    assert code == 2 and out.startswith("error: --only model=[/x]: unknown model '[/x]'")
    code, out = invoke("plan", "-m", str(odd), "--env", "[/nope]")
    assert code == 2 and "--env [/nope]: matches no environment; known: [/x], [red]cpu, local" in out
    code, out = invoke("ls", "--db", str(tmp_path / "[red]x" / "m.db"))
    assert code == 6 and f"no result store at {tmp_path}/[red]x/m.db" in out


def test_option_paths_that_cannot_be_what_they_name_are_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    code, out = invoke("report", "--db", str(tmp_path / "r.db"), "--out", str(a_file))
    assert (code, out) == (2, f"error: --out {a_file}: is a file; pass a folder\n")
    code, out = invoke("report", "--db", str(tmp_path / "r.db"), "--out", str(a_file / "sub"))
    assert code == 2 and f"is under {a_file}, which is a file" in out
    # --db is the store's to judge: a path it cannot use is a store error (6), one line naming it.
    code, out = invoke("run", "--db", str(a_file / "m.db"))
    assert code == 6 and out.count("\n") == 1 and f"{a_file} is a file, not a folder" in out, out
    code, out = invoke("ls", "--db", str(tmp_path))
    assert code == 6 and out.count("\n") == 1 and "is a folder, not a result store" in out, out
    code, out = invoke("run", "--db", str(tmp_path / "r.db"), "--workdir", str(a_file))
    assert code == 2 and "--workdir" in out
    assert not (tmp_path / "r.db").exists()


def test_a_matrix_path_that_is_not_a_matrix_file_is_one_line(tmp_path: Path) -> None:
    code, out = invoke("plan", "-m", str(tmp_path))
    assert code == 2 and "is a folder; -m takes a matrix file" in out
    binary = tmp_path / "m.yaml"
    binary.write_bytes(b"name: x\n\xff\xfe\x00")
    code, out = invoke("plan", "-m", str(binary))
    assert code == 2 and "byte 8 is not UTF-8 text" in out
    deep = tmp_path / "deep.yaml"
    deep.write_text("axes: " + "[" * 20000 + "]" * 20000)
    code, out = invoke("plan", "-m", str(deep))
    assert code == 2 and "nested too deeply" in out


def test_gpus_without_image_is_refused_not_ignored(tmp_path: Path) -> None:
    code, out = invoke("run", "--gpus", "2", "--db", str(tmp_path / "r.db"))
    assert code == 2 and out.startswith("error: --gpus 2: applies to --image only")
    assert not (tmp_path / "r.db").exists()


def test_max_cells_refuses_and_accepts(tmp_path: Path) -> None:
    quick = Path(matrix_mod.DEFAULT_MATRIX)
    code, out = invoke("plan", "-m", str(quick), "--db", str(tmp_path / "r.db"), "--max-cells", "4")
    assert code == 2 and "up to 9 cells (1 environment x model 2 x precision 2 x batch_size 2 + 1 include rules)" in out
    code, out = invoke("plan", "-m", str(quick), "--db", str(tmp_path / "r.db"), "--max-cells", "9")
    assert code == 0 and "8 cells" in out


def test_a_min_effect_that_is_not_a_fraction_is_refused(tmp_path: Path) -> None:
    for value in ("nan", "-0.1", "1.5"):
        code, out = invoke("compare", "a", "b", "--db", str(tmp_path / "r.db"), "--min-effect", value)
        assert code == 2 and "--min-effect" in out, out


def test_a_store_that_is_not_a_store_is_one_line_and_status_6(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    for command in (["ls"], ["show"], ["compare", "a", "b"], ["report", "--out", str(tmp_path / "o")]):
        code, out = invoke(*command, "--db", str(db))
        assert code == 6 and out.count("\n") == 1 and str(db) in out, (command, out)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as con:  # a valid SQLite file of another program
        con.execute("create table t (x)")
    con.close()
    code, out = invoke("ls", "--db", str(other))
    assert code == 6 and "is not a matrix result store" in out


@pytest.mark.parametrize(("column", "value", "says"), [
    ("params", '{"model": ', "column params of result"),
    ("metrics", "[1, 2]", "column metrics of result"),
    ("status", "exploded", "has status 'exploded', which this matrix does not know"),
])
def test_a_damaged_row_is_one_line_naming_it(tmp_path: Path, column: str, value: str, says: str) -> None:
    from tests.report.conftest import fill_store, load_results

    db = fill_store(tmp_path / "r.db", load_results())
    key = matrix_mod.load(None).cells()[0].key  # a cell of the quickstart, which `plan` asks the store about
    with sqlite3.connect(db) as con:  # the store is append-only: the damaged row is the newest of its repeat
        cols = [r[1] for r in con.execute("PRAGMA table_info(results)") if r[1] != "id"]
        picked = ", ".join("?" if c in (column, "cell_key") else c for c in cols)
        row_id = con.execute(f"INSERT INTO results ({', '.join(cols)}) SELECT {picked} FROM results WHERE id = 3",
                             [value if c == column else key for c in cols if c in (column, "cell_key")]).lastrowid
    con.close()
    commands = [["compare", "ngc-18.07", "cluster-pt041"], ["report", "--format", "json", "--out", str(tmp_path)],
                ["plan", "-m", str(Path(matrix_mod.DEFAULT_MATRIX))]]
    for command in commands[2:] if column == "status" else commands[:2]:
        code, out = invoke(*command, "--db", str(db))
        assert code == 6 and says in out and out.count("\n") == 1, (command, out)
        assert f"result {row_id}" in out


def test_a_blank_run_id_never_means_every_run(tmp_path: Path) -> None:
    """`matrix clean --run "$RUN"` with RUN unset would have removed every run's containers, live ones too."""
    for args in (["clean", "--run", ""], ["show", " "], ["report", "--run", "", "--out", str(tmp_path)]):
        code, out = invoke(*args, "--db", str(tmp_path / "r.db"))
        assert code == 2 and "a blank one would mean every run" in out, (args, out)
