"""The ordered environments of a bisect: image patterns, templates, names from the matrix file, and the one cell."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import matrix as matrix_mod
from runner.base.errors import ConfigError
from runner.bisect.envs import expand_pattern, plan

ROOT = Path(__file__).resolve().parents[2]

MATRIX = """
name: bisect-plan
environments:
  - {name: a, backend: local, env: {OMP_NUM_THREADS: "1"}}
  - {name: b, backend: local, env: {OMP_NUM_THREADS: "2"}}
  - {name: c, backend: local}
  - {name: ngc, backend: docker, image: "nvcr.io/nvidia/pytorch:24.01-py3", env: {OMP_NUM_THREADS: "4"}, shm_size: 16g}
axes: {model: [mnist_cnn, mlp], precision: [fp32, bf16], batch_size: [32], device: [cpu]}
exclude:
  - {environment: c, model: mlp, precision: bf16}
include:
  - {environment: ngc, model: mnist_cnn, workers: 2}
run: {iterations: 5, warmup: 1, repeats: 3}
"""


@pytest.fixture
def m() -> matrix_mod.Matrix:
    return matrix_mod.parse(MATRIX, Path("bisect.yaml"))


def test_year_month_ranges_cross_years() -> None:
    images = expand_pattern("nvcr.io/nvidia/pytorch:{24.01..25.09}-py3")
    assert len(images) == 21
    assert images[:2] == ["nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.02-py3"]
    assert images[11:13] == ["nvcr.io/nvidia/pytorch:24.12-py3", "nvcr.io/nvidia/pytorch:25.01-py3"]
    assert images[-1] == "nvcr.io/nvidia/pytorch:25.09-py3"
    assert expand_pattern("r/i:{2023.11..2024.02}") == ["r/i:2023.11", "r/i:2023.12", "r/i:2024.01", "r/i:2024.02"]
    assert expand_pattern("r/i:{24.01..24.10..3}") == ["r/i:24.01", "r/i:24.04", "r/i:24.07", "r/i:24.10"]
    assert expand_pattern("r/i:{24.03..24.01}") == ["r/i:24.03", "r/i:24.02", "r/i:24.01"]  # the order given


def test_integer_ranges_lists_and_plain_images() -> None:
    assert expand_pattern("img:v{1..4}") == ["img:v1", "img:v2", "img:v3", "img:v4"]
    assert expand_pattern("img:{08..11}") == ["img:08", "img:09", "img:10", "img:11"]
    assert expand_pattern("img:{1..10..4}") == ["img:1", "img:5", "img:9"]
    assert expand_pattern("img:{3..1}") == ["img:3", "img:2", "img:1"]
    assert expand_pattern("img:{24.01,24.03,24.10}-py3") == ["img:24.01-py3", "img:24.03-py3", "img:24.10-py3"]
    assert expand_pattern(" img:2.1 ") == ["img:2.1"]


@pytest.mark.parametrize(("pattern", "says"), [
    ("img:{1..3}-{a,b}", "one brace group per pattern"),
    ("img:{1..{2..3}}", "unbalanced or nested"),
    ("img:{1..3", "unbalanced"),
    ("img:1..3}", "unbalanced"),
    ("img:{24.13..25.01}", "month 13 is not 01 to 12"),
    ("img:{24.01..2025.01}", "years of the same width"),
    ("img:{a..f}", "two integers"),
    ("img:{1..5..0}", "the step must be a whole number"),
    ("img:{1.5..2.5}", "two integers"),
    ("img:{a}", "at least two non-empty items"),
    ("img:{a,,b}", "at least two non-empty items"),
    ("img:{1..3} x", "holds a space"),
    ("", "an empty pattern"),
    ("img:{1..5000}", "more than 1000"),
])
def test_bad_patterns_are_one_line_each(pattern: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as e:
        expand_pattern(pattern)
    assert "\n" not in str(e.value) and str(e.value).startswith("--images")


def test_names_in_order_and_one_cell_each(m: matrix_mod.Matrix) -> None:
    p = plan(m, ["c", "a", "b"], only=["model=mlp", "precision=fp32"])
    assert p.names == ["c", "a", "b"]
    assert [c.env_name for c in p.cells] == ["c", "a", "b"]
    assert len({c.key for c in p.cells}) == 3 and all(dict(c.params) == dict(p.cells[0].params) for c in p.cells)
    full = {c.key for c in m.cells()}
    assert {c.key for c in p.cells} <= full  # the matrix file's own cells: `matrix run` shares them
    assert plan(m, only=["model=mlp", "precision=fp32"]).names == ["a", "b", "c", "ngc"]  # the file's order


@pytest.mark.parametrize(("names", "only", "says"), [
    (["a", "zz"], ["model=mlp", "precision=fp32"], "no environment 'zz'; environments: a, b, c, ngc"),
    (["a", "a"], ["model=mlp", "precision=fp32"], "'a' is listed twice"),
    (["a"], ["model=mlp", "precision=fp32"], "at least two environments"),
    (["a", "b"], ["model=mlp"], "picks 2 cells in environment a; a bisect follows one: add --only for precision"),
    (["a", "c"], ["model=mlp", "precision=bf16"], "picks no cell in environment c"),
    (["a", "ngc"], ["model=mnist_cnn", "precision=fp32"], "the cell differs between environments a and ngc (workers)"),
])
def test_a_bisect_needs_one_cell_in_each_environment_in_order(m: matrix_mod.Matrix, names: list[str],
                                                             only: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        plan(m, names, only=only)


def test_images_copy_the_template_with_the_image_replaced(m: matrix_mod.Matrix) -> None:
    p = plan(m, images=["nvcr.io/nvidia/pytorch:{24.10..25.01}-py3"], template="ngc",
             only=["model=mnist_cnn", "precision=fp32"])
    assert p.names == ["pytorch-24.10-py3", "pytorch-24.11-py3", "pytorch-24.12-py3", "pytorch-25.01-py3"]
    envs = p.environments
    assert [e.image for e in envs] == [f"nvcr.io/nvidia/pytorch:{t}-py3"
                                                   for t in ("24.10", "24.11", "24.12", "25.01")]
    assert all(e.env == {"OMP_NUM_THREADS": "4"} and e.shm_size == "16g" for e in envs)
    assert all(c.params.get("workers") == 2 for c in p.cells)  # the template's include rule applies
    again = plan(m, images=["nvcr.io/nvidia/pytorch:{24.10..25.01}-py3"], template="ngc",
                 only=["model=mnist_cnn", "precision=fp32"])
    assert [c.key for c in again.cells] == [c.key for c in p.cells]  # stable: a second bisect reuses the store


def test_images_without_a_template_are_the_cells_of_run_image(m: matrix_mod.Matrix) -> None:
    """Named like `matrix run --image` names its environment, with the same params: the same cell keys, so a
    bisect reuses what `matrix run --image X` stored, and the other way round."""
    from runner.commands.run import with_image as _with_image

    p = plan(m, images=["img:{1..3}"], only=["model=mlp", "precision=bf16"])
    for image, cell in zip(["img:1", "img:2", "img:3"], p.cells, strict=True):
        ran = matrix_mod.select(_with_image(m, image, None).cells(), (), ["model=mlp", "precision=bf16"])
        assert [c.key for c in ran] == [cell.key]


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"names": ["a", "b"], "images": ["img:{1..2}"]}, "by name or --images patterns, not both"),
    ({"template": "ngc"}, "--template and --gpus go with --images"),
    ({"images": ["img:{1..2}"], "template": "a"}, "a local environment has no image to replace; environments with "
                                               "an image: ngc"),
    ({"images": ["img:{1..2}"], "template": "nope"}, "no environment 'nope'"),
    ({"images": ["img:1", "img:1"]}, "listed twice"),
    ({"images": ["img:{1..2}"], "template": "ngc", "gpus": "all"}, "the template says its own GPUs"),
])
def test_image_lists_say_what_is_wrong(m: matrix_mod.Matrix, kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        plan(m, only=["model=mlp", "precision=fp32"], **kwargs)  # type: ignore[arg-type]


def test_the_eras_example_bisects_one_cell_per_release() -> None:
    eras = matrix_mod.load(ROOT / "examples/eras.yaml")
    p = plan(eras, only=["model=wrn", "precision=fp32"])
    assert p.names == ["torch-1.0-2018", "torch-1.7-2020", "torch-1.13-2022", "torch-2.6-2025", "torch-2.13-2026"]
    assert p.cells[0].params["wrn_depth"] == 10 and p.cell_text().startswith("model=wrn precision=fp32")
    with pytest.raises(ConfigError, match="picks no cell in environment torch-1.13-2022"):
        plan(eras, only=["model=wrn", "precision=bf16"])  # excluded there: too slow on this CPU
