"""`workload:` in a matrix file: checked at plan time with file, field and line; its identity in the cell key;
axes of its own; what a backend puts on the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import matrix
from runner.backends.workloads import arguments, launcher_spec
from runner.base.errors import ConfigError
from runner.domain.cells import Task
from tests.backends.workloads.conftest import EXAMPLES, WEIRD

BASE = """
name: wl
environments:
  - {name: a, backend: local}
  - {name: b, backend: local, env: {X: "1"}}
workload:
  argv: ["{python}", "{files}/train.py", "--bs", "{batch_size}", "--steps", "{steps}", "--label", "{label}"]
  files: [train.py]
  parser: {kind: mllog}
axes:
  batch_size: [8, 16]
  steps: [10]
  label: [LABEL]
"""


def load(tmp_path: Path, text: str = BASE, script: str = "print('v1')\n") -> matrix.Matrix:
    (tmp_path / "train.py").write_text(script)
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("LABEL", json.dumps(WEIRD)))
    return matrix.load(path)


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    return str(e.value)


def test_cells_have_the_written_axes_and_the_workloads_identity(tmp_path: Path) -> None:
    m = load(tmp_path)
    cells = m.cells()
    assert len(cells) == 4
    assert dict(cells[0].params) == {"batch_size": 8, "steps": 10, "label": WEIRD}  # no bench defaults
    assert {c.workload.name for c in cells} == {None} and all(c.workload for c in cells)
    same = load(tmp_path).cells()
    assert [c.key for c in same] == [c.key for c in cells]
    edited = load(tmp_path, script="print('v2')\n").cells()  # a changed script is a new definition
    assert not {c.key for c in edited} & {c.key for c in cells}
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"x")
    assert [c.key for c in load(tmp_path).cells()] == [c.key for c in cells]


def test_a_folder_is_hashed_by_its_members(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    text = BASE.replace("files: [train.py]", "files: [train.py, pkg]")
    keys = [c.key for c in load(tmp_path, text).cells()]
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert [c.key for c in load(tmp_path, text).cells()] == keys
    (tmp_path / "pkg" / "b.py").write_text("B = 2\n")
    assert not set(keys) & {c.key for c in load(tmp_path, text).cells()}


def test_a_parser_change_is_a_new_definition(tmp_path: Path) -> None:
    keys = {c.key for c in load(tmp_path).cells()}
    other = load(tmp_path, BASE.replace("{kind: mllog}", "{kind: mllog, skip: 0}")).cells()
    assert not keys & {c.key for c in other}
    spelled = load(tmp_path, BASE.replace("{kind: mllog}", "mllog")).cells()  # the same configuration
    assert {c.key for c in spelled} == keys


def test_launcher_arguments_carry_the_values_verbatim_in_one_ascii_argument(tmp_path: Path) -> None:
    cell = load(tmp_path).cells()[0]
    words = arguments(Task(cell, 2), "/x/results")
    assert words[0] == "workload" and len(words) == 2
    assert all(32 <= ord(c) < 127 for c in words[1])  # a Slurm manifest field: no tab, newline or other control
    spec = json.loads(words[1])
    assert spec["values"]["label"] == WEIRD and spec["values"]["batch_size"] == "8"
    assert spec["values"]["repeat"] == "3" and spec["files"]  # Task(cell, 2) is the third repeat, as run prints it.startswith("/x/results/files-")
    assert spec["params"] == {"batch_size": 8, "steps": 10, "label": WEIRD, "iterations": 50, "warmup": 10, "seed": 0}
    assert launcher_spec(Task(cell, 1), None)["argv"][1] == "{files}/train.py"  # the launcher expands, once


@pytest.mark.parametrize("old, new, words", [
    ('"{steps}"', '"{stepz}"', "m.yaml: workload.argv[5] (line 7): {stepz} is not an axis of this matrix"),
    ('"{steps}"', '"{steps:>4}"', "takes no format or conversion"),
    ('"{steps}"', '"{0}"', "{0} is not a placeholder"),
    ("files: [train.py]", "files: [nothere.py]", "workload.files[0] (line 8): nothere.py: no such file"),
    ("files: [train.py]", "files: []", "{files} names the folder of the workload's files"),
    ("{kind: mllog}", "{kind: mllogg}", "workload.parser.kind (line 9): 'mllogg' is not allowed"),
    ("{kind: mllog}", "{kind: mllog, figures: {}}", "figures is not a setting of the mllog parser"),
    ("{kind: mllog}", "{kind: pattern, figures: {tput: {regex: 'x (1)'}}}", "say which direction is better"),
    ("  parser:", "  shell: true\n  parser:", "workload.shell (line 9): unknown key 'shell'"),
])
def test_mistakes_name_file_field_and_line(tmp_path: Path, old: str, new: str, words: str) -> None:
    assert old in BASE
    assert words in refused(tmp_path, BASE.replace(old, new, 1))


def test_own_axes_need_a_workload_and_bench_keeps_its_rules(tmp_path: Path) -> None:
    bench = "environments: [{name: a, backend: local}]\naxes: {model: [bert], steps: [10]}\n"
    why = refused(tmp_path, bench)
    assert "axes.steps" in why and "unknown key 'steps'" in why
    assert "unknown model 'bert'" in why
    workload = BASE.replace("batch_size: [8, 16]", "batch_size: [8, 16]\n  model: [bert-large]\n  dataset: [wiki]")
    assert {c.params["model"] for c in load(tmp_path, workload).cells()} == {"bert-large"}
    assert "'fp99' is not allowed" in refused(tmp_path, BASE.replace("steps: [10]", "steps: [10]\n  precision: [fp99]"))
    assert "an axis of your own is a name" in refused(tmp_path, BASE.replace("steps: [10]", "steps: [10]\n  2x: [1]"))
    assert "filled by matrix" in refused(tmp_path, BASE.replace("steps: [10]", "steps: [10]\n  output: [1]"))
    assert "octal" in refused(tmp_path, BASE.replace("steps: [10]", "steps: [010]"))


def test_an_environment_overrides_the_matrixs_workload(tmp_path: Path) -> None:
    text = BASE.replace("{name: b, backend: local, env: {X: \"1\"}}",
                        "{name: b, backend: local, workload: {argv: ['{python}', '/opt/train.py', '{label}']}}")
    cells = load(tmp_path, text).cells()
    by_env = {c.env_name: c.workload for c in cells}
    assert by_env["b"].argv == ("{python}", "/opt/train.py", "{label}")
    assert by_env["b"].parser == by_env["a"].parser  # the rest comes from the matrix's workload


def test_every_environment_runs_a_workload_when_one_does(tmp_path: Path) -> None:
    text = ("environments:\n  - {name: a, backend: local}\n  - {name: b, backend: local, workload: "
            "{argv: ['{python}', 'x.py'], parser: mllog}}\naxes: {batch_size: [8]}\n")
    assert "environments[0] (line 2): this environment runs no workload while others do" in refused(tmp_path, text)


def test_a_placeholder_needs_a_value_in_every_cell(tmp_path: Path) -> None:
    text = BASE.replace("--label\", \"{label}\"", "--label\", \"{label}\", \"{lr}\"").replace(
        "  label: [LABEL]", "  label: [LABEL]\ninclude:\n  - {batch_size: 8, lr: 0.1}")
    assert "{lr} has no value in cell" in refused(tmp_path, text)


def test_only_and_rules_take_own_axes(tmp_path: Path) -> None:
    text = BASE.replace("steps: [10]", "steps: [10, 20]") + "exclude:\n  - {steps: 20, batch_size: 16}\n"
    cells = load(tmp_path, text).cells()
    assert len(cells) == 6
    picked = matrix.select(cells, only=["steps=20"])
    assert {c.params["steps"] for c in picked} == {20} and len(picked) == 2
    with pytest.raises(ConfigError, match="steps has: 10, 20"):
        matrix.select(cells, only=["steps=30"])


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_examples_plan(path: Path) -> None:
    cells = matrix.load(path).cells()
    assert cells and all(c.workload is not None for c in cells)


@pytest.mark.parametrize("run,field", [("{iterations: auto, warmup: 5}", "run.iterations"),
                                       ("{warmup: auto}", "run.warmup"),
                                       ("{warmup: {min: 2, max: 20}}", "run.warmup")])
def test_auto_counts_are_the_benchmarks_rules_not_a_workloads(tmp_path: Path, run: str, field: str) -> None:
    """A workload's program times itself: calibrating its window or warming it up until steady cannot apply."""
    message = refused(tmp_path, BASE + f"run: {run}\n")
    assert f"m.yaml: {field}" in message and "a workload takes a count" in message, message
    assert "Traceback" not in message


def test_plan_says_what_a_repeat_runs(tmp_path: Path) -> None:
    """bench's iterations mean nothing to a user's program: plan names the workload instead."""
    from runner.commands.plan import plan_runs

    said = plan_runs(load(tmp_path, BASE.replace("workload:\n", "workload:\n  name: tiny-train\n")))
    assert "tiny-train" in said and "iterations" not in said
    quick = matrix.load(EXAMPLES.parent / "quickstart.yaml")
    assert plan_runs(quick) == quick.run.window_text and "warm-up" in plan_runs(quick)


def test_pattern_figures_written_as_a_list_are_refused_with_the_shape_to_write(tmp_path: Path) -> None:
    text = BASE.replace("parser: {kind: mllog}", 'parser: {kind: pattern, figures: [{name: throughput, regex: "x"}]}')
    message = refused(tmp_path, text)
    assert "m.yaml: workload.parser.figures" in message and "a mapping of figure names" in message, message


def test_the_repeat_placeholder_counts_as_run_and_show_print(tmp_path: Path) -> None:
    cell = load(tmp_path).cells()[0]
    assert [launcher_spec(Task(cell, r), None)["values"]["repeat"] for r in range(3)] == ["1", "2", "3"]
