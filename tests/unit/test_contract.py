"""The controller's view of bench.py's contract is bench.py's own: every axis the controller passes is
a flag of bench.py's parser, with the same choices, and the constants the controller reads are bench.py's."""

from __future__ import annotations

import argparse
import importlib.util
from types import ModuleType

import pytest

from runner import contract
from runner.spec import AXIS_NAMES, LAYOUT_AXES, Axes, Cell, EnvironmentBase, RunSettings


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_under_test", contract.BENCH_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: action for action in parser._actions for opt in action.option_strings}


def test_constants_are_bench_pys(bench: ModuleType) -> None:
    for name in ("SCHEMA", "RESULT_PREFIX", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_ARGS", "EXIT_OOM",
                 "EXIT_UNSUPPORTED", "PRECISIONS", "AMP_IMPLS", "DEVICES", "DATASET_KINDS"):
        assert getattr(contract, name) == tuple(getattr(bench, name)) if isinstance(
            getattr(bench, name), tuple) else getattr(contract, name) == getattr(bench, name), name
    assert set(contract.MODELS) == set(bench.TORCHVISION_MODELS) | set(bench.BUILTIN_MODELS)


def test_every_axis_is_a_bench_flag_with_the_same_choices(bench: ModuleType) -> None:
    flags = options(bench.build_parser())
    for axis in AXIS_NAMES:
        if axis in LAYOUT_AXES:
            continue
        flag = "--" + axis.replace("_", "-")
        assert flag in flags, f"axis {axis!r} has no {flag} in bench.py's parser"
        choices = flags[flag].choices
        if choices is not None:
            annotation = str(Axes.model_fields[axis].annotation)
            assert all(repr(c) in annotation for c in choices), (axis, choices, annotation)


def test_every_model_bench_knows_is_accepted_by_matrix_yaml(bench: ModuleType) -> None:
    models = sorted(set(bench.TORCHVISION_MODELS) | set(bench.BUILTIN_MODELS))
    assert Axes.model_validate({"model": models}).model == models


def test_bench_args_of_a_full_cell_parse_in_bench(bench: ModuleType) -> None:
    params = {"model": "wrn", "precision": "amp", "batch_size": 8, "dataset": "synthetic", "device": "cpu",
              "channels_last": True, "cudnn_benchmark": False, "compile": False, "workers": 0, "threads": 1,
              "image_size": 32, "num_classes": 10, "loss_scale": 128.0, "wrn_depth": 10, "wrn_width": 2,
              "lr": 0.1, "amp_impl": "manual", "breakdown": True, "eval_batches": 2}
    assert set(params) | set(LAYOUT_AXES) == set(AXIS_NAMES), "a new axis needs a value here"
    env = EnvironmentBase(name="e", backend="local")
    args = bench.parse_args(Cell(env, params, RunSettings()).bench_args())
    assert args.amp_impl == "manual" and args.channels_last and args.wrn_width == 2
