"""matrix.yaml validation and cell expansion."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runner import matrix
from runner.base.errors import ConfigError
from runner.domain.cells import Cell, RunSettings

BASE = """
environments:
  - name: cpu
    backend: local
axes:
  model: [mnist_cnn]
  precision: [fp32, bf16]
  batch_size: [16, 32]
"""


def parse(text: str) -> matrix.Matrix:
    return matrix.parse(textwrap.dedent(text), Path("m.yaml"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse(text)
    return str(e.value)


def test_expansion_is_the_product_in_order() -> None:
    cells = parse(BASE).cells()
    assert [(c.params["precision"], c.params["batch_size"]) for c in cells] == [
        ("fp32", 16), ("fp32", 32), ("bf16", 16), ("bf16", 32)]
    assert len({c.key for c in cells}) == 4


def test_unknown_key_names_file_field_line_and_allowed_keys() -> None:
    msg = error_of(BASE.replace("batch_size: [16, 32]", "batch_size: [16, 32]\n  batchsize: [8]"))
    assert "m.yaml: axes.batchsize (line 9): unknown key 'batchsize'" in msg
    assert "allowed: model, precision, batch_size" in msg


def test_bad_precision_lists_allowed_values() -> None:
    msg = error_of(BASE.replace("[fp32, bf16]", "[fp32, fp4]"))
    assert "axes.precision[1] (line 7)" in msg
    assert "'fp32', 'tf32', 'fp16', 'amp', 'amp-bf16', 'bf16' or 'fp8'" in msg


def test_unknown_backend_lists_known_backends() -> None:
    msg = error_of(BASE.replace("backend: local", "backend: kubernetes"))
    assert "environments[0].backend (line 4)" in msg
    assert "allowed: docker, local, slurm" in msg


def test_backend_specific_fields_are_checked() -> None:
    msg = error_of(BASE.replace("backend: local", "backend: docker"))
    assert "environments[0].image" in msg and "required" in msg
    msg = error_of(BASE.replace("backend: local", "backend: local\n    image: x"))
    assert "environments[0].image (line 5): unknown key 'image'" in msg


def test_unknown_model_and_dataset() -> None:
    assert "unknown model 'resnet9000'; allowed:" in error_of(BASE.replace("[mnist_cnn]", "[resnet9000]"))
    msg = error_of(BASE.replace("batch_size: [16, 32]", "batch_size: [16]\n  dataset: [mnist]"))
    assert "unknown dataset 'mnist'; allowed: synthetic, npz:PATH" in msg


def test_wrong_types_and_ranges() -> None:
    assert "axes.batch_size[0]" in error_of(BASE.replace("[16, 32]", "[big]"))
    assert "values must be 1 or more" in error_of(BASE.replace("[16, 32]", "[0]"))
    assert "run.repeats" in error_of(BASE + "run: {repeats: 0}\n")


def test_duplicate_environment_names() -> None:
    text = BASE.replace("environments:\n", "environments:\n  - {name: cpu, backend: local}\n")
    assert "the name 'cpu' is used twice" in error_of(text)


def test_yaml_syntax_error_has_line() -> None:
    assert "(line 3): not valid YAML" in error_of("environments:\n  - name: [\n  x: {")


def test_rules_must_use_known_keys_and_environments() -> None:
    assert "exclude[0].colour" in error_of(BASE + "exclude: [{colour: red}]\n")
    assert "no environment 'gpu'" in error_of(BASE + "exclude: [{environment: gpu}]\n")
    assert "include[0].precision" in error_of(BASE + "include: [{precision: fp64}]\n")


def test_exclude_removes_matching_cells() -> None:
    cells = parse(BASE + "exclude: [{precision: bf16, batch_size: 32}]\n").cells()
    assert [(c.params["precision"], c.params["batch_size"]) for c in cells] == [
        ("fp32", 16), ("fp32", 32), ("bf16", 16)]


def test_include_extends_matching_cells_or_adds_new_ones() -> None:
    cells = parse(BASE + "include:\n  - {precision: bf16, channels_last: true}\n"
                         "  - {model: wrn, precision: fp32, batch_size: 8}\n").cells()
    assert [c.params.get("channels_last") for c in cells[:4]] == [None, None, True, True]
    assert len(cells) == 5
    assert dict(cells[4].params) == {"model": "wrn", "precision": "fp32", "batch_size": 8,
                                     "dataset": "synthetic", "gpus": 1, "nodes": 1}


def test_include_values_take_the_axis_type() -> None:
    cells = parse(BASE + "include: [{precision: fp32, workers: '2'}]\n").cells()
    assert cells[0].params["workers"] == 2


def test_keys_are_stable_and_depend_on_what_is_measured() -> None:
    a = parse(BASE).cells()
    b = parse(BASE.replace("  - name: cpu", "  - name: cpu\n    tags: [x]")).cells()
    assert [c.key for c in a] == [c.key for c in b]  # tags do not change what is measured
    c = parse(BASE + "run: {iterations: 7}\n").cells()
    assert {x.key for x in a}.isdisjoint({x.key for x in c})
    d = parse(BASE + "run: {repeats: 9, timeout: 5}\n").cells()
    assert [x.key for x in a] == [x.key for x in d]  # how often and how long are not the cell
    # The key is a pure function of the spec: the same in a fresh interpreter.
    code = ("from runner import matrix; import pathlib, sys; "
            "print(' '.join(c.key for c in matrix.parse(sys.stdin.read(), pathlib.Path('m.yaml')).cells()))")
    out = subprocess.run([sys.executable, "-c", code], input=textwrap.dedent(BASE), capture_output=True,
                         text=True, check=True).stdout.split()
    assert out == [x.key for x in a]


def test_bench_args_follow_the_contract() -> None:
    env = parse(BASE).environments[0]
    cell = Cell(env, {"model": "wrn", "precision": "amp", "batch_size": 8, "gpus": 2,
                      "channels_last": True, "compile": False}, RunSettings(iterations=5, warmup=1))
    assert cell.bench_args() == ["--iterations", "5", "--warmup", "1", "--seed", "0", "--model", "wrn",
                                 "--precision", "amp", "--batch-size", "8", "--channels-last"]


def test_select_by_env_tag_and_only() -> None:
    text = BASE.replace("environments:\n", "environments:\n  - {name: box, backend: local, tags: [metal]}\n")
    cells = parse(text).cells()
    assert {c.env_name for c in matrix.select(cells, ["metal"])} == {"box"}
    picked = matrix.select(cells, (), ["precision=bf16", "batch_size=16"])
    assert [(c.env_name, c.params["precision"], c.params["batch_size"]) for c in picked] == [
        ("box", "bf16", 16), ("cpu", "bf16", 16)]
    with pytest.raises(ConfigError, match="matches no environment; known: box, cpu, local, metal"):
        matrix.select(cells, ["gpu"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        matrix.select(cells, (), ["fp32"])


def test_shipped_matrices_are_valid() -> None:
    root = Path(__file__).resolve().parents[2]
    for path in [root / "matrix.yaml", *sorted((root / "examples").glob("*.yaml"))]:
        assert matrix.load(path).cells(), path


def test_image_with_gpus_runs_the_axes_on_the_gpu() -> None:
    from runner.commands.run import with_image as _with_image

    m = parse(BASE.replace("batch_size: [16, 32]", "batch_size: [16, 32]\n  device: [cpu]")
              + "exclude: [{environment: cpu, precision: bf16}]\n")
    on_gpu = _with_image(m, "nvcr.io/nvidia/pytorch:18.07-py3", "all")
    assert [e.name for e in on_gpu.environments] == ["pytorch-18.07-py3"]
    assert {c.params["device"] for c in on_gpu.cells()} == {"cuda"}
    assert len(on_gpu.cells()) == 4  # the environment-specific exclude no longer applies
    on_cpu = _with_image(m, "matrix/debian-torch:1.13", None)
    assert {c.params["device"] for c in on_cpu.cells()} == {"cpu"}


TYPED = BASE + """  lr: [1, 0.5]
  channels_last: [true, false]
"""


def test_rule_values_take_the_axis_type_before_matching() -> None:
    # lr: 1 in a rule must match the cell whose lr axis became 1.0 (it did not: "1" != "1.0").
    cells = parse(TYPED + "exclude:\n  - {lr: 1}\n").cells()
    assert {c.params["lr"] for c in cells} == {0.5}
    # An include that names an existing combination extends it instead of adding a second cell.
    plain = parse(TYPED).cells()
    extended = parse(TYPED + "include:\n  - {lr: 1, channels_last: 'true', threads: 2}\n").cells()
    assert len(extended) == len(plain)
    assert {c.params.get("threads") for c in extended if c.params["lr"] == 1.0 and c.params["channels_last"]} == {2}
    assert all("threads" not in c.params for c in extended if not (c.params["lr"] == 1.0 and c.params["channels_last"]))


def test_only_converts_values_and_an_empty_selection_is_an_error() -> None:
    cells = parse(TYPED).cells()
    assert {c.params["channels_last"] for c in matrix.select(cells, only=["channels_last=true"])} == {True}
    assert {c.params["lr"] for c in matrix.select(cells, only=["lr=1"])} == {1.0}
    two = matrix.select(cells, only=["batch_size=16", "batch_size=32", "precision=bf16"])
    assert {(c.params["batch_size"], c.params["precision"]) for c in two} == {(16, "bf16"), (32, "bf16")}
    with pytest.raises(ConfigError, match=r"batch_size=64: no cell has that value; batch_size has: 16, 32"):
        matrix.select(cells, only=["batch_size=64"])
    with pytest.raises(ConfigError, match=r"lr=0.25: no cell has that value; lr has: 1.0, 0.5"):
        matrix.select(cells, only=["precision=fp32", "channels_last=true", "lr=0.25"])
    fewer = parse(TYPED + "exclude:\n  - {precision: bf16, batch_size: 16}\n").cells()
    with pytest.raises(ConfigError, match="no cell matches all of these together"):
        matrix.select(fewer, only=["precision=bf16", "batch_size=16"])
    with pytest.raises(ConfigError, match="lr=fast"):
        matrix.select(cells, only=["lr=fast"])


# The quickstart as it was before `warmup: auto` and `iterations: auto` existed, and the keys its cells had then
# (runner/domain/cells.py Cell.key on that tree): a fixed count keeps meaning what it meant, so stored results keep their cells.
OLD_QUICKSTART = """
name: quickstart
environments:
  - name: local-cpu
    backend: local
    tags: [local, bare-metal]
    env: {OMP_NUM_THREADS: "2"}
axes:
  model: [mnist_cnn, wrn]
  precision: [fp32, bf16]
  batch_size: [32, 64]
  dataset: [synthetic]
  device: [cpu]
include:
  - {model: wrn, wrn_depth: 10, wrn_width: 2}
run: {iterations: 20, warmup: 5, repeats: 3, timeout: 300, seed: 0}
"""
OLD_KEYS = ["639426410348", "f88193578aa7", "e319dae87fec", "27a38261b861", "0a1c53df305c", "5507e19d38e6",
            "346db3a3a266", "faa4382e6196"]


def test_old_matrix_files_keep_their_cell_keys() -> None:
    m = parse(OLD_QUICKSTART)
    assert [c.key for c in m.cells()] == OLD_KEYS
    assert m.run.warmup == 5 and m.run.iterations == 20 and not m.run.calibrated
    assert m.cells()[0].bench_args()[:6] == ["--iterations", "20", "--warmup", "5", "--seed", "0"]
    # Settings left out keep their defaults (50 and 10), and their keys.
    bare = parse("environments: [{name: e, backend: local}]\naxes: {model: [mlp]}\n")
    assert [c.key for c in bare.cells()] == ["4e43eb44690f"]


def test_auto_settings_key_their_definition_not_a_calibrated_count() -> None:
    def keys(run: str) -> list[str]:
        return [c.key for c in parse(OLD_QUICKSTART.replace(
            "run: {iterations: 20, warmup: 5, repeats: 3, timeout: 300, seed: 0}", f"run: {run}")).cells()]

    auto = keys("{iterations: auto, warmup: auto}")
    assert not set(auto) & set(OLD_KEYS)
    assert keys("{iterations: {min_time: 2s}, warmup: {}}") == auto              # the defaults, written out
    assert keys("{iterations: {min_time: 2000ms, min: 5, max: 10000}, warmup: auto}") == auto
    assert keys("{iterations: {min_time: 3s}, warmup: auto}") != auto             # another bound: another cell
    assert keys("{iterations: auto, warmup: {max: 60}}") != auto
    assert keys("{iterations: auto, warmup: 5}") != auto
    cell = parse(OLD_QUICKSTART.replace("iterations: 20, warmup: 5", "iterations: {min_time: 1.5s, min: 2, "
                                        "max: 300}, warmup: {min: 3, max: 40, max_time: 5s, window: 4}")).cells()[0]
    args = cell.bench_args()
    assert "--iterations" not in args  # the first repeat calibrates
    assert args[:12] == ["--window-time", "1.5", "--window-min", "2", "--window-max", "300", "--warmup", "3",
                         "--warmup-max", "40", "--steady-window", "4"]
    with_count = cell.bench_args(iterations=17)
    assert with_count[with_count.index("--iterations") + 1] == "17"


@pytest.mark.parametrize(("run", "needle"), [
    ("{iterations: fast}", "run.iterations"),
    ("{iterations: {min_time: soon}}", "'soon' is not a duration"),
    ("{iterations: {min: 10, max: 5}}", "max (5) is below min (10)"),
    ("{iterations: {minimum: 3}}", "unknown key 'minimum'; allowed: min_time, min, max"),
    ("{warmup: {max: 6}}", "cannot hold the two windows of 5 iterations"),
    ("{warmup: {tolerance: 150%}}", "run.warmup"),
    ("{warmup: {window: 1}}", "run.warmup"),
    ("{iterations: auto, warmup: 0}", "give warmup at least 1"),
    ("{iterations: 2.5}", "2.5 is not allowed"),
    ("{warmup: -1}", "-1 is not allowed"),
])
def test_auto_settings_are_checked_at_plan_time(run: str, needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(OLD_QUICKSTART.replace("run: {iterations: 20, warmup: 5, repeats: 3, timeout: 300, seed: 0}",
                                     f"run: {run}"))
    assert needle in str(e.value), str(e.value)
