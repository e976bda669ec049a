"""Inputs refused or kept as written when matrix.yaml is read, before anything runs (issue 18)."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from runner import matrix
from runner.base.errors import ConfigError

BASE = """
environments:
  - name: cpu
    backend: local
axes:
  model: [mnist_cnn]
  batch_size: [16, 32]
"""


def parse(text: str) -> matrix.Matrix:
    return matrix.parse(textwrap.dedent(text), Path("m.yaml"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse(text).cells()
    return str(e.value)


# Duplicate keys -------------------------------------------------------------------------------------
def test_a_key_given_twice_is_refused_at_every_level_with_both_lines() -> None:
    msg = error_of(BASE + "axes:\n  batch_size: [64]\n")
    assert msg == ("m.yaml (line 8): the key 'axes' is given twice (first on line 5); YAML would silently "
                   "keep only the last: write it once")
    msg = error_of(BASE.replace("  batch_size: [16, 32]", "  batch_size: [16, 32]\n  model: [wrn]"))
    assert msg.startswith("m.yaml: axes (line 8): the key 'model' is given twice (first on line 6)")
    msg = error_of(BASE.replace("backend: local", "backend: local\n    env:\n      A: '1'\n      A: '2'"))
    assert msg.startswith("m.yaml: environments[0].env (line 7): the key 'A' is given twice (first on line 6)")
    msg = error_of(BASE + "include:\n  - {model: wrn, wrn_depth: 10, wrn_depth: 16}\n")
    assert "include[0] (line 9): the key 'wrn_depth' is given twice" in msg


def test_merge_keys_may_be_overridden_as_yaml_intends() -> None:
    m = parse(BASE.replace("environments:\n  - name: cpu\n    backend: local",
                           "environments:\n  - &base {name: cpu, backend: local, env: {A: '1'}}\n"
                           "  - <<: *base\n    name: cpu2"))
    assert [e.name for e in m.environments] == ["cpu", "cpu2"] and m.environments[1].env == {"A": "1"}


# Values as written ------------------------------------------------------------------------------------
def test_env_values_reach_the_process_as_written() -> None:
    m = parse(BASE.replace("backend: local", "backend: local\n    env: {A: yes, B: 010, C: 1.10, D: 1:30, "
                                             "E: off, F: 1e3, G: 2024-01-01, H: ~, I: 0x1F, ON: x, on: y}"))
    assert m.environments[0].env == {"A": "yes", "B": "010", "C": "1.10", "D": "1:30", "E": "off", "F": "1e3",
                                     "G": "2024-01-01", "H": "", "I": "0x1F", "ON": "x", "on": "y"}


def test_text_fields_of_every_backend_keep_what_was_typed() -> None:
    m = parse("""
        environments:
          - {name: 1.10, backend: local, tags: [yes, 010], python: 3.10}
          - {name: s, backend: slurm, time: 1:30, setup: [1.10], partition: 010, sbatch_options: []}
          - {name: d, backend: docker, image: 1.10, user: 1000, shm_size: 8, mounts: [{source: 010, target: 1:30}]}
        axes: {precision: [fp32]}
        include:
          - {environment: 1.10, batch_size: 8}
    """)
    local, slurm, docker = m.environments
    assert (local.name, local.tags, local.python) == ("1.10", ["yes", "010"], "3.10")
    assert (slurm.time, slurm.setup, slurm.partition) == ("1:30", ["1.10"], "010")  # 1:30, not 90 minutes
    assert (docker.image, docker.user, docker.shm_size) == ("1.10", "1000", "8")  # type: ignore[attr-defined]
    assert (docker.mounts[0].source, docker.mounts[0].target) == ("010", "1:30")
    assert {c.params["batch_size"] for c in m.cells() if c.env_name == "1.10"} == {64, 8}


def test_an_env_value_that_is_a_list_is_refused_not_turned_into_its_python_spelling() -> None:
    msg = error_of(BASE.replace("backend: local", "backend: local\n    env: {A: [1, 2]}"))
    assert msg == ("m.yaml: environments[0].env.A (line 5): expected text, not a list; write one value, in quotes "
                   "if YAML would read it otherwise")
    msg = error_of(BASE.replace("backend: local", "backend: local\n    env: {'B=C': x}"))
    assert "environments[0].env (line 5): 'B=C' cannot be an environment variable name" in msg


@pytest.mark.parametrize(("value", "says"), [
    ("010", "010 is read by YAML 1.1 as 8 (a leading 0 makes it octal); write 8 if that is what you mean"),
    ("1:30", "1:30 is read by YAML 1.1 as 90 (a colon makes it base 60)"),
    ("yes", "yes is read by YAML as the boolean true, not a number"),
])
def test_numbers_yaml_reads_otherwise_than_they_look_are_refused(value: str, says: str) -> None:
    msg = error_of(BASE.replace("[16, 32]", f"[16, {value}]"))
    assert msg == f"m.yaml: axes.batch_size[1] (line 7): {says}" or msg.startswith(
        f"m.yaml: axes.batch_size[1] (line 7): {says}")
    assert "seed (line" in error_of(BASE + f"run: {{seed: {value}}}\n") or value == "1:30"


# Nothing to run, too much to run ------------------------------------------------------------------------
def test_an_empty_axis_is_refused_with_and_without_include() -> None:
    for extra in ("", "include:\n  - {model: wrn, wrn_depth: 10}\n"):
        msg = error_of(BASE.replace("[16, 32]", "[]") + extra)
        assert msg == ("m.yaml: axes.batch_size (line 7): an empty list gives no cells; give at least one value, "
                       "or leave the axis out")


def test_exclude_rules_that_remove_every_cell_are_refused() -> None:
    msg = error_of(BASE + "exclude:\n  - {model: mnist_cnn}\n")
    assert msg == "m.yaml: exclude: the rules remove every cell; nothing would run"


def test_a_huge_grid_is_refused_quickly_naming_the_axes_that_multiply() -> None:
    values = ", ".join(str(i) for i in range(1, 1001))
    text = BASE.replace("[16, 32]", f"[{values}]") + f"  lr: [{', '.join(f'0.{i:04d}' for i in range(1, 1001))}]\n"
    started = time.perf_counter()
    msg = error_of(text)
    assert time.perf_counter() - started < 30  # a million cells were never expanded (minutes before)
    assert msg == ("m.yaml: axes: up to 1,000,000 cells (1 environment x batch_size 1000 x lr 1000), more than "
                   "the limit of 10,000; check the axes for a typo, or pass --max-cells 1000000 to mean it")
    assert len(matrix.parse(textwrap.dedent(BASE.replace("[16, 32]", "[1, 2, 3]")), max_cells=3).cells()) == 3
    with pytest.raises(ConfigError, match="up to 3 cells"):
        matrix.parse(textwrap.dedent(BASE.replace("[16, 32]", "[1, 2, 3]")), max_cells=2)


def test_a_cells_key_is_computed_once() -> None:
    cell = parse(BASE).cells()[0]
    assert cell.key is cell.key and "key" in vars(cell)


# Run settings ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("setting", "says"), [
    ("seed: -1", "run.seed (line 8): -1 is not allowed; allowed: an integer from 0 to 4294967295"),
    ("seed: 4294967296", "run.seed (line 8): 4294967296 is not allowed; allowed: an integer from 0 to 4294967295"),
    ("repeats: 100000", "run.repeats (line 8): Input should be less than or equal to 1000"),
    ("timeout: .inf", "run.timeout (line 8): Input should be a finite number"),
    ("repeats: {min: 3, max: 5000}", "repeats.max: Input should be less than or equal to 1000"),
])
def test_run_settings_out_of_range_are_refused(setting: str, says: str) -> None:
    assert says in error_of(BASE + f"run: {{{setting}}}\n")


# References --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("bound", "says"), [
    ("{value: 100, tolerance: ten%}", "references[0].throughput.tolerance (line 10): tolerance 'ten%': write a "
                                      "percentage such as 5%"),
    ("{value: 100, tolerance: -50%}", "tolerance '-50%': a tolerance is a distance, 0 or more"),
    ("{value: 100, tolerance: -5}", "tolerance -5: a tolerance is a finite distance, 0 or more"),
    ("{min: .nan}", "references[0].throughput.min (line 10): nan: a reference is a finite number"),
    ("'100 ± 1e999%'", "'100 ± 1e999%' is not a reference (tolerance '1e999%'"),
    ("'>= 1e400'", "'>= 1e400' is not a reference (inf: a reference is a finite number)"),
    ("{min: yes}", "references[0].throughput.min (line 10): yes is read by YAML as the boolean true"),
])
def test_every_reference_is_checked_when_the_file_is_read(bound: str, says: str) -> None:
    msg = error_of(BASE + f"references:\n  - match: {{model: mnist_cnn}}\n    throughput: {bound}\n")
    assert says in msg and "\n" not in msg


# Aliases that expand without limit ------------------------------------------------------------------
LAUGHS = """
environments: [{name: cpu, backend: local}]
axes: {n: [1]}
workload:
  parser: pattern
  argv:
    - &a [x, x, x, x, x, x, x, x, x, x]
    - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
    - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
    - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
    - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
    - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
"""


def test_aliases_that_expand_past_the_bound_are_refused_at_once_wherever_they_are() -> None:
    started = time.monotonic()
    says = error_of(LAUGHS)
    assert time.monotonic() - started < 2
    assert says.startswith("m.yaml (line ") and "aliases (*name) expand to more than 100,000 values" in says


def test_an_alias_inside_its_own_value_is_refused() -> None:
    says = error_of(BASE + "workload: &w {argv: [*w], parser: pattern}\n")
    assert "refers to a value that contains it" in says, says


def test_a_few_aliases_are_still_read() -> None:
    m = parse("""
    environments:
      - {name: a, backend: local, env: &e {OMP_NUM_THREADS: "1"}}
      - {name: b, backend: local, env: *e}
    axes: {model: [mnist_cnn], batch_size: [16]}
    """)
    assert len(m.cells()) == 2
