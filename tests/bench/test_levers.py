"""The speed levers as parts of a cell's definition (bench's --optimizer, --optimizer-impl, --compile-mode,
--cuda-graphs, --loss-scale, --loss-impl, --checkpoint): recorded with the result, refused in one line where two
options cannot go together, and `unsupported` with one sentence where this torch or device lacks one (on this CPU:
CUDA graphs, FP16) or where it would do nothing (checkpointing a model without blocks, a loss scale for bf16).
Each lever's loss against eager: tests/bench/test_lever_losses.py."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from typing import Any

import pytest
import torch

from runner import matrix
from runner.analysis.recipes import recipe
from runner.bench import graphs, levers, models, optim, training
from runner.bench import precision as recipes
from runner.bench.errors import Unsupported
from tests.bench.test_bench import args_for
from tests.conftest import ROOT

COMMON = ["--model", "mlp", "--batch-size", "4", "--dataset", "synthetic", "--device", "cpu", "--iterations", "3",
          "--warmup", "1", "--threads", "1"]


def bench(*extra: str, precision: str = "amp-bf16") -> tuple[int, dict[str, Any] | None, str]:
    proc = subprocess.run([sys.executable, "-m", "runner.bench", *COMMON, "--precision", precision, *extra],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("MATRIX_RESULT ")]
    return proc.returncode, json.loads(lines[-1][len("MATRIX_RESULT "):]) if lines else None, proc.stderr


def test_cuda_graphs_on_a_cpu_are_unsupported_with_one_sentence() -> None:
    code, result, _ = bench("--cuda-graphs")
    assert result is not None and code == 4 and result["status"] == "unsupported"
    assert result["reason"] == "CUDA graphs need a CUDA device; this run trains on cpu"


@pytest.mark.parametrize("impl", ["plain", "foreach", "fused"])
def test_the_optimizer_implementation_is_recorded(impl: str) -> None:
    code, result, err = bench("--optimizer-impl", impl)
    assert result is not None, err
    if result["status"] == "unsupported":  # a torch without it says so
        assert impl in result["reason"]
        return
    assert code == 0 and result["status"] == "ok", err
    rec = result["precision"]
    assert rec["optimizer"] == f"sgd-momentum-0.9-{impl}" and rec["optimizer_impl"] == impl
    assert rec["cuda_graphs"] is False and rec["data_on_device"] is True


@pytest.mark.parametrize(("extra", "says"), [
    (["--compile-mode", "max-autotune"], "--compile-mode max-autotune needs --compile"),
    (["--cuda-graphs", "--breakdown"], "--breakdown cannot time them apart"),
])
def test_levers_that_cannot_go_together_are_one_line(extra: list[str], says: str) -> None:
    code, result, err = bench(*extra)
    assert code == 2 and result is None
    (line,) = err.strip().splitlines()
    assert line.startswith("bench: error:") and says in line


def test_the_levers_are_matrix_axes_in_the_cell_key(tmp_path: Any) -> None:
    text = """
name: levers
environments: [{name: here, backend: local}]
axes: {model: mlp, precision: amp-bf16, device: cpu, optimizer_impl: [auto, fused], cuda_graphs: [false, true],
       compile: true, compile_mode: [default, reduce-overhead]}
"""
    cells = matrix.parse(text, tmp_path / "m.yaml").cells()
    assert len({c.key for c in cells}) == 8
    args = next(c for c in cells if c.params["cuda_graphs"] and c.params["optimizer_impl"] == "fused").bench_args()
    assert "--cuda-graphs" in args and args[args.index("--optimizer-impl") + 1] == "fused"
    with pytest.raises(Exception, match="compile_mode"):
        matrix.parse(text.replace("reduce-overhead", "fastest"), tmp_path / "m.yaml")


# ----------------------------------------------------------------------------- issue 38's levers

def test_the_new_levers_are_matrix_axes_in_the_cell_key(tmp_path: Any) -> None:
    text = """
name: levers38
environments: [{name: here, backend: local}]
axes: {model: gpt_tiny, precision: amp-bf16, device: cpu, optimizer: [sgd, adamw], loss_impl: [plain, chunked],
       checkpoint: [false, true], loss_scale: [null]}
"""
    cells = matrix.parse(text.replace(", loss_scale: [null]", ""), tmp_path / "m.yaml").cells()
    assert len({c.key for c in cells}) == 8
    args = next(c for c in cells if c.params["checkpoint"] and c.params["loss_impl"] == "chunked"
                and c.params["optimizer"] == "adamw").bench_args()
    assert "--checkpoint" in args and args[args.index("--loss-impl") + 1] == "chunked"
    assert args[args.index("--optimizer") + 1] == "adamw"
    with pytest.raises(Exception, match="loss_impl"):
        matrix.parse(text.replace("chunked", "fused").replace(", loss_scale: [null]", ""), tmp_path / "m.yaml")


@pytest.mark.parametrize(("extra", "precision", "says"), [
    (["--checkpoint"], "amp-bf16", "--checkpoint recomputes each transformer block's activations; model mlp has no "
                                   "blocks to wrap"),
    (["--loss-impl", "chunked"], "amp-bf16", "--loss-impl chunked splits a transformer's output projection"),
    (["--loss-scale", "128"], "amp-bf16", "--loss-scale is FP16 amp's (native autocast or the manual recipe); "
                                          "amp-bf16 has no loss scaling to set"),
    (["--loss-scale", "128"], "fp32", "fp32 has no loss scaling to set"),
])
def test_a_lever_that_would_do_nothing_is_unsupported_with_one_sentence(extra: list[str], precision: str,
                                                                        says: str) -> None:
    code, result, err = bench(*extra, precision=precision)
    assert result is not None and code == 4 and result["status"] == "unsupported", err
    assert says in result["reason"] and result["reason"].count(". ") == 0, result["reason"]
    assert "Traceback" not in err


def test_fp8_with_the_chunked_loss_is_unsupported_not_bypassed() -> None:
    """The chunked loss computes the output projection itself: with fp8 it would skip that FP8 linear layer."""
    args = types.SimpleNamespace(model="gpt_tiny", loss_impl="chunked", checkpoint=False)
    with pytest.raises(Unsupported, match="FP8 linear layer: loss_impl plain measures it"):
        levers.check_levers(args, {"precision": "fp8"})
    levers.check_levers(args, {"precision": "amp-bf16"})  # no refusal


def test_a_static_loss_scale_is_planned_without_a_scaler_and_allows_the_graph(fake_gpu: Any) -> None:
    """Native FP16 autocast with --loss-scale: no GradScaler, so no host decision in the step: the whole step may be
    one CUDA graph, as the manual recipe's may; the dynamic scale and apex's still refuse it."""
    cuda = torch.device("cuda", 0)
    caps = {"native": True, "apex": True}
    static = recipes.plan_precision(args_for("amp", loss_scale=256.0, cuda_graphs=True), cuda, caps)
    assert static["mechanism"] == "native" and static["loss_scale"] == 256.0 and static["autocast"] is not None
    manual = recipes.plan_precision(args_for("amp", "manual", cuda_graphs=True), cuda, caps)
    assert manual["loss_scale"] == recipes.MANUAL_LOSS_SCALE == 256.0  # the 2018 default when none is given
    with pytest.raises(Unsupported, match="dynamic loss scaling decides on the host"):
        recipes.plan_precision(args_for("amp", cuda_graphs=True), cuda, caps)
    with pytest.raises(Unsupported, match="apex's amp with its dynamic loss scaler only"):
        recipes.plan_precision(args_for("amp", "apex", loss_scale=256.0), cuda, {"native": False, "apex": True})
    with pytest.raises(Unsupported, match="reduce-overhead mode captures CUDA graphs of its own"):
        recipes.plan_precision(args_for("amp-bf16", cuda_graphs=True, compile=True, compile_mode="reduce-overhead"),
                               cuda, caps)


def test_the_static_scale_step_trains_as_the_unscaled_one() -> None:
    """make_steps with a static scale multiplies the loss and divides the gradients: with a power of two, exactly the
    unscaled SGD trajectory (FP32 stands in for FP16 here: no GPU); without the unscale it would step 1024x."""
    torch.manual_seed(0)
    plain, scaled = torch.nn.Linear(6, 3), torch.nn.Linear(6, 3)
    scaled.load_state_dict(plain.state_dict())
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    args = args_for("fp32", lr=0.1)
    cpu = torch.device("cpu")
    steps = []
    for model, plan in ((plain, {"mechanism": "none", "loss_scale": None}),
                        (scaled, {"mechanism": "native", "loss_scale": 1024.0})):
        opt = training.make_optimizer(model.parameters(), args, cpu, allow_fused=True)[0]
        steps.append(training.make_steps(model, opt, dict(plan, autocast=None, model_dtype=None), None, None, None))
    for _ in range(5):
        for forward, backward, update in steps:
            backward(forward(x, y))
            update()
    for p, q in zip(plain.parameters(), scaled.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-7)


def test_max_autotune_under_the_whole_step_graph_runs_without_its_own_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(training.torch, "compile", lambda model, mode=None: seen.append(mode) or model)
    extra: dict[str, Any] = {}
    for whole_step in (False, True):
        args = types.SimpleNamespace(compile=True, compile_mode="max-autotune", cuda_graphs=whole_step)
        training.compile_model(torch.nn.Linear(2, 2), args, extra)
    assert seen == ["max-autotune", "max-autotune-no-cudagraphs"]
    assert extra["compile_mode_ran"].startswith("max-autotune-no-cudagraphs (the whole step is one CUDA graph")


def test_adamw_decays_the_matrices_only_and_is_recorded() -> None:
    """nanoGPT's split: every tensor of 2+ dimensions (the linear layers' weights, the embeddings; the tied output
    projection once) decayed by 0.1; biases and LayerNorms' scales and shifts not."""
    torch.manual_seed(0)
    model = models.build_transformer("gpt_tiny")
    args = args_for("fp32", optimizer="adamw", lr=6e-4)
    opt, impl, why, record = optim.make_optimizer(model.parameters(), args, torch.device("cpu"), allow_fused=True)
    decayed, other = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and other["weight_decay"] == 0.0
    assert decayed["betas"] == (0.9, 0.95) and decayed["eps"] == 1e-8 and decayed["lr"] == 6e-4
    names = {id(p): n for n, p in model.named_parameters()}
    assert sorted(names[id(p)] for p in decayed["params"]) == sorted(
        n for n, p in model.named_parameters() if n.endswith("weight") and "ln" not in n)
    assert all(p.dim() == 1 for p in other["params"]) and len(other["params"]) == 2 * (2 + 2 + 4) + 2
    assert record["optimizer"] == f"adamw-betas-0.9-0.95-wd-0.1-{impl}" and impl == "default"
    assert record["weight_decay"]["decayed_tensors"] == 2 + 4 * 2  # wte (= head), wpe, 4 matrices a block
    assert why.startswith("auto on cpu: torch's default AdamW")


def test_auto_picks_fused_adamw_under_a_dynamic_scaler_but_never_fused_sgd() -> None:
    """Fused AdamW honours the steps a GradScaler skips (fused SGD advanced its momentum on them: NaN on an H100)."""
    both = {"fused", "foreach"}
    names = lambda c: [n for n, _ in c[0]]  # noqa: E731
    assert names(optim.optimizer_choices("auto", "cuda", both, True, True, "adamw")) == ["fused", "foreach", "default"]
    assert names(optim.optimizer_choices("auto", "cuda", both, True, True, "sgd")) == ["foreach", "default"]
    assert names(optim.optimizer_choices("auto", "cuda", both, False, False, "adamw")) == ["foreach", "default"]


def test_adamw_in_a_cuda_graph_keeps_its_step_on_the_device() -> None:
    args = args_for("fp32", optimizer="adamw", lr=6e-4, cuda_graphs=True)
    opt, _, _, _ = optim.make_optimizer(torch.nn.Linear(2, 2).parameters(), args, torch.device("cpu"), True)
    assert all(g["capturable"] for g in opt.param_groups)


def test_the_recipe_words_name_the_new_levers() -> None:
    words = recipe({"mechanism": "native", "dtype": "bfloat16", "optimizer": "adamw-betas-0.9-0.95-wd-0.1-"
                               "fused", "loss_impl": "chunked", "checkpoint": True, "cuda_graphs": True,
                               "compile": True}, "amp-bf16")
    assert words["optimizer"] == "AdamW, fused"
    assert words["flags"] == "torch.compile, CUDA graph, activation checkpointing, chunked cross-entropy"
    assert recipe({"optimizer": "sgd-momentum-0.9-default", "loss_scale": 256.0})["loss_scale"] == \
        "static 256"


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_the_graphs_warm_up_steps_are_undone(optimizer: str) -> None:
    """The whole-step graph's three eager warm-up steps trained the model before the first counted step: undone
    (weights, batch norm's statistics, the optimizer's state as before a first step), the training then takes exactly
    the steps a run without the graph takes (bit for bit on this CPU)."""
    def make() -> tuple[torch.nn.Module, Any, Any]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                                    torch.nn.Linear(8, 3))
        args = args_for("fp32", optimizer=optimizer, lr=0.05)
        opt = optim.make_optimizer(model.parameters(), args, torch.device("cpu"), allow_fused=True)[0]
        return model, opt, training.make_steps(model, opt, {"autocast": None, "model_dtype": None}, None, None, None)

    def train(steps: Any, n: int) -> None:
        forward, backward, update = steps
        for _ in range(n):
            backward(forward(x, y))
            update()

    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    fresh, _, steps = make()
    train(steps, 4)
    warmed, opt, steps = make()
    undo = graphs.undo_warmup(warmed, opt)
    train(steps, 3)  # GraphedStep's eager warm-up
    assert not torch.equal(warmed[0].weight, fresh[0].weight)
    undo()
    train(steps, 4)
    for (name, a), b in zip(fresh.state_dict().items(), warmed.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)
