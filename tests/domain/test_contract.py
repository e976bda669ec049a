"""The controller's view of the benchmark's contract is the benchmark's own: every axis the controller
passes is a flag of bench's parser, with the same choices; the constants the controller reads (with ast)
are bench's; and every argument rule refuses at plan time exactly what bench's parser refuses at run time."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from runner.bench import args as bench_args
from runner.bench import contract as bench_contract
from runner.bench.errors import BadArgs
from runner.domain import bench_contract as contract
from runner.domain.cells import AXIS_NAMES, LAYOUT_AXES, Axes, Cell, EnvironmentBase, RunSettings

BASE = {"--model": "mlp", "--precision": "fp32", "--batch-size": "2", "--dataset": "synthetic"}


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: action for action in parser._actions for opt in action.option_strings}


def bench_takes(**values: object) -> bool:
    """Whether bench's own parser accepts these options (as Cell.bench_args writes them: str(value))."""
    argv = dict(BASE)
    argv.update({"--" + k.replace("_", "-"): str(v) for k, v in values.items()})
    try:
        bench_args.parse_args([x for kv in argv.items() for x in kv])
    except BadArgs:
        return False
    except SystemExit as e:  # argparse's own refusal (exit 2)
        assert e.code == bench_contract.EXIT_BAD_ARGS
        return False
    return True


def test_constants_are_benchs() -> None:
    for name in ("SCHEMA", "RESULT_PREFIX", "EXIT_OK", "EXIT_FAILED", "EXIT_BAD_ARGS", "EXIT_OOM",
                 "EXIT_UNSUPPORTED", "PRECISIONS", "AMP_IMPLS", "DEVICES", "DATASET_KINDS", "ARGUMENT_RULES",
                 "MIN_IMAGE_SIZE", "MIN_IMAGE_SIZE_DEFAULT", "TRANSFORMER_MODELS", "ATTENTION_BACKENDS",
                 "FP8_IMPLS", "FP8_RECIPES", "OPTIMIZERS", "OPTIMIZER_IMPLS", "LOSS_IMPLS", "COMPILE_MODES"):
        assert getattr(contract, name) == getattr(bench_contract, name), name
    assert set(contract.MODELS) == (set(bench_contract.TORCHVISION_MODELS) | set(bench_contract.BUILTIN_MODELS)
                                    | set(bench_contract.TRANSFORMER_MODELS))
    # ast reads every assignment of the bench's contract: nothing there is computed.
    public = {k for k in vars(bench_contract) if k.isupper()}
    assert public == {k for k in contract.constants() if k.isupper()}


def test_every_axis_is_a_bench_flag_with_the_same_choices() -> None:
    flags = options(bench_args.build_parser())
    for axis in AXIS_NAMES:
        if axis in LAYOUT_AXES:
            continue
        flag = "--" + axis.replace("_", "-")
        assert flag in flags, f"axis {axis!r} has no {flag} in bench's parser"
        choices = flags[flag].choices
        if choices is not None:
            annotation = str(Axes.model_fields[axis].annotation)
            assert all(repr(c) in annotation for c in choices), (axis, choices, annotation)


def test_every_numeric_option_of_bench_has_a_rule_of_its_type() -> None:
    """A new numeric option cannot skip the rules: plan would not know what bench refuses."""
    numeric = {a.dest: a.type for a in bench_args.build_parser()._actions if a.type in (int, float)}
    assert set(numeric) == set(contract.ARGUMENT_RULES)
    for name, kind in numeric.items():
        assert contract.ARGUMENT_RULES[name]["type"] == kind.__name__, name
        assert contract.ARGUMENT_RULES[name]["allowed"], name


def _probes(rule: dict[str, object]) -> list[int | float]:
    edges = [int(rule[k]) for k in ("min", "max", "above") if k in rule]  # type: ignore[call-overload]
    ints = {-(2**40), -1, 0, 1, 2, 3, 4, 5, 6, 9, 10, 11, 12, 16, 22, 27, 28, 34, 2**31, 2**32 - 1, 2**32,
            10**6, 10**6 + 1, *(e + d for e in edges for d in (-1, 0, 1))}
    if rule["type"] == "int":
        return sorted(int(v) for v in ints)
    return sorted({float(v) for v in ints} | {1e-300, 0.01, 0.5, 1e308}) + [math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("option", sorted(bench_contract.ARGUMENT_RULES))
def test_plan_and_bench_agree_on_every_value(option: str) -> None:
    model = {"model": "gpt2_124m"} if option == "seq_len" else {}  # a transformer's option
    for value in _probes(contract.ARGUMENT_RULES[option]):
        cell = {**model, option: value}
        plan_takes = contract.value_problem(option, value) is None and contract.cell_problem(cell) is None
        assert plan_takes == bench_takes(**cell), (option, value)


def test_plan_and_bench_agree_on_image_size_per_model() -> None:
    for model in contract.MODELS:
        for size in (1, 2, 3, 4, 5, 6, 7, 16, 31, 32, 33, 224):
            plan_takes = contract.cell_problem({"model": model, "image_size": size}) is None
            assert plan_takes == bench_takes(model=model, image_size=size), (model, size)


def test_plan_and_bench_agree_on_seq_len_per_model() -> None:
    """--seq-len is a transformer's, at most its context; an image model refuses it at plan time as in bench."""
    for model in contract.MODELS:
        for seq_len in (2, 64, 128, 129, 256, 257, 1024, 1025):
            plan_takes = contract.cell_problem({"model": model, "seq_len": seq_len}) is None
            assert plan_takes == bench_takes(model=model, seq_len=seq_len), (model, seq_len)


@pytest.mark.parametrize("model", ["mlp", "gpt_tiny"])
def test_plan_and_bench_agree_on_the_forms_of_a_data_set(tmp_path: Path, model: str) -> None:
    """What a data set may look like, for an image model and a transformer (tokens: synthetic or text:PATH);
    whether its path exists is known only where bench runs."""
    (tmp_path / "d.npz").write_bytes(b"")
    forms = ["synthetic", "mnist", "synthetic:x", ":x", "npz:", "npz", "cifar10:", "imagefolder:", "text:", "text",
             f"npz:{tmp_path / 'd.npz'}", f"cifar10:{tmp_path}", f"imagefolder:{tmp_path}", f"foo:{tmp_path}",
             f"NPZ:{tmp_path / 'd.npz'}", f"text:{tmp_path / 'd.npz'}"]
    for form in forms:
        try:
            Axes.model_validate({"dataset": [form]})
            plan_takes = contract.cell_problem({"model": model, "dataset": form}) is None
        except ValueError:
            plan_takes = False
        assert plan_takes == bench_takes(dataset=form, model=model), form


def test_every_model_bench_knows_is_accepted_by_matrix_yaml() -> None:
    models = sorted(set(bench_contract.TORCHVISION_MODELS) | set(bench_contract.BUILTIN_MODELS)
                    | set(bench_contract.TRANSFORMER_MODELS))
    assert Axes.model_validate({"model": models}).model == models


def test_bench_args_of_a_full_cell_parse_in_bench() -> None:
    params = {"model": "wrn", "precision": "amp", "batch_size": 8, "dataset": "synthetic", "device": "cpu",
              "channels_last": True, "cudnn_benchmark": False, "compile": False, "workers": 0, "threads": 1,
              "image_size": 32, "num_classes": 10, "loss_scale": 128.0, "wrn_depth": 10, "wrn_width": 2,
              "lr": 0.1, "amp_impl": "manual", "breakdown": True, "eval_batches": 2,
              "optimizer": "adamw", "optimizer_impl": "foreach", "compile_mode": None, "cuda_graphs": False}
    transformer = {"seq_len": 64, "attention": "flash", "fp8_impl": "torchao", "fp8_recipe": "rowwise",
                   "loss_impl": "chunked", "checkpoint": True}
    assert set(params) | set(transformer) | set(LAYOUT_AXES) == set(AXIS_NAMES), "a new axis needs a value here"
    env = EnvironmentBase(name="e", backend="local")
    args = bench_args.parse_args(Cell(env, params, RunSettings()).bench_args())
    assert args.amp_impl == "manual" and args.channels_last and args.wrn_width == 2
    assert args.optimizer_impl == "foreach" and args.compile_mode is None and not args.cuda_graphs
    gpt = {**params, **transformer, "model": "gpt_small", "precision": "fp8"}
    args = bench_args.parse_args(Cell(env, gpt, RunSettings()).bench_args())
    assert (args.seq_len, args.attention, args.fp8_impl, args.fp8_recipe) == (64, "flash", "torchao", "rowwise")
    assert (args.optimizer, args.loss_impl, args.checkpoint, args.lr) == ("adamw", "chunked", True, 0.1)
