"""The GPT-2-family transformer in the benchmark, on this CPU with real PyTorch: the model (sizes, causality, the
plain attention equal to SDPA), token data, tokens per second and MFU with their definitions, the attention
backends and FP8 as `unsupported` with one sentence, and the plan-time rules for the new axes."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from runner import matrix
from runner.analysis import StoredRepeat, get_metric
from runner.analysis import frame as long_frame
from runner.base.errors import ConfigError
from runner.bench import attention, data, flops, fp8, models, preflight
from runner.bench.contract import TRANSFORMER_MODELS
from runner.bench.errors import BadArgs, Unsupported
from tests.bench.test_bench import FAST, Run, args_for, assert_one_line_error

TINY = ("--model", "gpt_tiny", "--batch-size", "2", "--seq-len", "16", "--iterations", "3", "--warmup", "1", *FAST)


def gpt(sdpa: Any = None, name: str = "gpt_tiny") -> torch.nn.Module:
    torch.manual_seed(0)
    return models.build_transformer(name, sdpa)


@pytest.mark.parametrize(("name", "parameters"), [
    ("gpt2_124m", 124_475_904), ("gpt2_350m", 354_871_296), ("gpt2_774m", 774_090_240),
    ("gpt2_1558m", 1_557_686_400)])
def test_gpt2_sizes_have_gpt2s_parameter_counts(name: str, parameters: int) -> None:
    """GPT-2 small, medium, large and XL with the vocabulary padded to 50304 (GPT-2's own: 124,439,808, 354,823,168,
    774,030,080 and 1,557,611,200: 47 padding rows of 768, 1024, 1280 and 1600 fewer); the output projection is the
    token embedding, counted once."""
    with torch.device("meta"):
        model = models.build_transformer(name)
    assert sum(p.numel() for p in model.parameters()) == parameters
    assert parameters - 47 * model.wte.weight.size(1) == {"gpt2_124m": 124_439_808, "gpt2_350m": 354_823_168,
                                                          "gpt2_774m": 774_030_080, "gpt2_1558m": 1_557_611_200}[name]
    assert model.head.weight is model.wte.weight


def test_plain_attention_equals_sdpa_and_is_causal() -> None:
    plain, fused = gpt(None), gpt(F.scaled_dot_product_attention)
    fused.load_state_dict(plain.state_dict(), strict=False)
    x = torch.randint(0, 256, (2, 16))
    out = plain(x)
    assert out.shape == (2 * 16, 256)
    torch.testing.assert_close(out, fused(x), rtol=1e-4, atol=1e-5)
    later = x.clone()
    later[:, 10:] = (later[:, 10:] + 1) % 256  # a change from position 10 on
    for model in (plain, fused):
        a, b = model(x).view(2, 16, -1), model(later).view(2, 16, -1)
        torch.testing.assert_close(a[:, :10], b[:, :10])  # earlier positions never see later tokens
        assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_gelu_without_torchs_is_the_tanh_approximation(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch before 1.2 has no F.gelu: the hand-written one must be GPT-2's."""
    x = torch.linspace(-4, 4, 50)
    expected = F.gelu(x, approximate="tanh")
    monkeypatch.delattr(models.F, "gelu")
    torch.testing.assert_close(models._gelu()(x), expected)


def test_text_source_targets_are_the_next_bytes(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(200)) * 3)
    tokens = data.read_text_tokens(str(text), 8)
    assert tokens.dtype == torch.uint8 and tokens.numel() == 600
    source = data.TextSource(tokens, 4, 8, seed=1)
    x, y = source.next()
    assert x.shape == (4, 8) and y.shape == (32,) and x.dtype == torch.long
    assert torch.equal(y.view(4, 8)[:, :-1], x[:, 1:])
    assert torch.equal((x[:, 0] + 8) % 200, y.view(4, 8)[:, -1])  # the byte after the window
    again = data.TextSource(tokens, 4, 8, seed=1).next()
    assert torch.equal(again[0], x)  # seeded
    (tmp_path / "short.txt").write_bytes(b"abc")
    with pytest.raises(BadArgs, match="has 3 bytes; --seq-len 8 needs at least 10"):
        data.read_text_tokens(str(tmp_path / "short.txt"), 8)


def test_tiny_transformer_trains_on_text_in_tokens_per_second_with_mfu(
        tmp_path: Path, bench_main: Callable[..., Run]) -> None:
    text = tmp_path / "t.txt"
    text.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 40)
    run = bench_main("--precision", "fp32", "--dataset", f"text:{text}", *TINY[:-6], "--iterations", "12",
                     "--warmup", "1", "--lr", "0.05", *FAST)
    assert run.rc == 0, run.stderr
    r = run.result
    m, w = r["metrics"], r["workload"]
    assert r["status"] == "ok" and r["params"]["seq_len"] == 16
    assert m["tokens"] == 12 * 2 * 16 == m["images"] and m["sequences"] == 24
    assert m["throughput"] == pytest.approx(m["tokens"] / m["window_s"])
    assert m["definitions"]["throughput"]["unit"] == "tok/s" and m["definitions"]["mfu"]["unit"] == "%"
    assert "measured" in m["definitions"]["mfu"]["how"]
    assert (w["layers"], w["width"], w["seq_len"], w["tokens"]) == (2, 64, 16, "bytes")
    n = w["parameters"] - w["position_parameters"]
    assert m["flops_per_token"] == 6 * n + 12 * 2 * 64 * 16
    assert m["peak_source"].startswith("measured: the best of") and "float32" in m["peak_source"]
    assert m["mfu"] == pytest.approx(m["throughput"] * m["flops_per_token"] / m["peak_flops"])
    assert 0 < m["mfu"] < 1
    assert m["loss_start"] > 5.0 and m["loss_end"] < m["loss_start"] - 1.0  # repeated text: learnt
    assert w["attention"] == {"requested": "auto", "ran": "sdpa (PyTorch's choice)"}


@pytest.mark.parametrize("precision", ["bf16", "amp-bf16"])
def test_tiny_transformer_trains_in_bf16_against_a_bf16_peak(precision: str, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--precision", precision, "--dataset", "synthetic", "--attention", "plain", *TINY)
    assert run.rc == 0, run.stderr
    m = run.result["metrics"]
    assert "bfloat16" in m["peak_source"] and m["mfu"] > 0
    assert run.result["workload"]["attention"]["ran"] == "plain"
    assert math.isfinite(m["loss_end"])


def test_fp8_on_the_cpu_is_unsupported_with_one_sentence(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--precision", "fp8", "--dataset", "synthetic", *TINY)
    assert run.rc == 4
    r = run.result
    assert r["status"] == "unsupported"
    assert r["reason"].startswith("fp8 training needs an NVIDIA GPU with FP8 tensor cores") and "CPU" in r["reason"]
    assert "Traceback" not in run.stderr


def test_fp8_problem_names_each_reason() -> None:
    ok = ("torchao", None)
    assert "this GPU is 8.6" in preflight.fp8_problem("cuda", (8, 6), True, ok)
    assert "no float8 dtypes" in preflight.fp8_problem("cuda", (9, 0), False, ok)
    assert "no FP8 training library here: torchao" in preflight.fp8_problem("cuda", (8, 9), True,
                                                                               (None, "torchao float8 ..."))
    assert preflight.fp8_problem("cuda", (8, 9), True, ok) is None
    assert preflight.fp8_problem("cuda", (10, 0), True, ("te", None)) is None


def test_fp8_plan_on_a_hopper_picks_torchao_and_its_recipe(fake_gpu: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mechanism and recipe that go into the result; nothing touches a GPU."""
    fake_gpu["value"] = (9, 0)
    ao = types.SimpleNamespace(convert_to_float8_training=None,
                               Float8LinearConfig=types.SimpleNamespace(from_recipe_name=None))
    monkeypatch.setattr(fp8, "_torchao", lambda: ao)
    plan = fp8.plan_fp8(args_for("fp8", fp8_recipe="rowwise"), torch.device("cuda"), (9, 0))
    assert (plan["mechanism"], plan["fp8_recipe"], plan["model_dtype"]) == ("torchao", "rowwise", torch.bfloat16)
    assert plan["input_dtype"] == torch.bfloat16  # an image model's inputs meet its BF16 weights (tokens stay ids)
    monkeypatch.setattr(fp8, "_torchao", lambda: None)
    monkeypatch.setattr(fp8, "_te", lambda: None)
    with pytest.raises(Unsupported, match="no FP8 training library here: torchao float8 training is not importable"):
        fp8.plan_fp8(args_for("fp8"), torch.device("cuda"), (9, 0))


@pytest.mark.parametrize(("backend", "needle"), [
    ("mem_efficient", "the mem_efficient backend of scaled_dot_product_attention cannot run here (cpu, float32"),
    ("cudnn", "the cudnn backend of scaled_dot_product_attention cannot run here (cpu"),
])
def test_attention_backend_missing_on_the_cpu_is_unsupported(backend: str, needle: str,
                                                             bench_main: Callable[..., Run]) -> None:
    run = bench_main("--precision", "fp32", "--dataset", "synthetic", "--attention", backend, *TINY)
    assert run.rc == 4, run.stderr
    assert needle in run.result["reason"]


def test_attention_math_runs_and_is_recorded(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--precision", "fp32", "--dataset", "synthetic", "--attention", "math", *TINY)
    assert run.rc == 0, run.stderr
    assert run.result["workload"]["attention"] == {"requested": "math", "ran": "sdpa math"}


def test_attention_without_sdpa_falls_back_to_plain_or_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch before 2.0: auto runs the hand-written attention, a named backend is unsupported."""
    monkeypatch.delattr(attention.F, "scaled_dot_product_attention")
    cpu = torch.device("cpu")
    assert attention.attention_plan("auto", cpu, torch.float32, 2, 32)[2]["ran"] == "plain"
    with pytest.raises(Unsupported, match=r"has no scaled_dot_product_attention \(PyTorch 2.0\+\), so no flash"):
        attention.attention_plan("flash", cpu, torch.float32, 2, 32)


def test_peak_table_and_flops_formula() -> None:
    peak, words = flops.table_peak("NVIDIA H100 80GB HBM3", "amp-bf16")
    assert peak == pytest.approx(989.4e12) and "H100 SXM5 bf16 dense peak 989.4" in words and "datasheet" in words
    assert flops.table_peak("NVIDIA H100 PCIe", "fp8")[0] == pytest.approx(1513e12)
    assert flops.table_peak("NVIDIA H100 80GB HBM3", "fp32")[0] == pytest.approx(66.9e12)  # fp32 runs with TF32 off
    assert flops.table_peak("NVIDIA A100-SXM4-80GB", "fp8") is None  # no FP8 on Ampere
    assert flops.table_peak("NVIDIA L40S", "fp8")[0] == pytest.approx(733e12)
    assert flops.table_peak("NVIDIA L4", "bf16")[0] == pytest.approx(121e12)
    assert flops.table_peak("NVIDIA A10G", "bf16") is None  # not the A10
    assert flops.table_peak("NVIDIA H100 NVL", "bf16") is None  # not listed: measured instead
    layers, heads, width, context, vocab = TRANSFORMER_MODELS["gpt2_124m"]
    value, text = flops.flops_per_token(124_475_904, 1024 * 768, layers, width, 1024)
    assert value == 6 * (124_475_904 - 786_432) + 12 * 12 * 768 * 1024 == 855_383_040
    assert text.startswith("6 * N + 12 * L * d * T = 6 * 123689472 + 12 * 12 * 768 * 1024")


def test_mfu_on_a_listed_gpu_uses_the_table_times_ranks() -> None:
    out, how = flops.mfu_metrics(1e5, 1e9, "f", torch.device("cuda"), "NVIDIA H100 80GB HBM3", "bf16", 2)
    assert out["peak_flops"] == pytest.approx(2 * 989.4e12) and out["mfu"] == pytest.approx(1e14 / (2 * 989.4e12))
    assert "x 2 devices" in out["peak_source"] and how and "table" in how


def test_frame_has_mfu_and_says_how_fp8_ran() -> None:
    row = {"params": {"model": "gpt2_124m", "precision": "fp8"}, "status": "ok",
           "metrics": {"throughput": 1e5, "mfu": 0.41},
           "raw": {"precision": {"mechanism": "torchao", "dtype": "float8", "fp8_recipe": "tensorwise"}}}
    df = long_frame([StoredRepeat.of(row)])
    assert df["mfu"].iloc[0] == 0.41 and get_metric("mfu").unit == "%"
    assert df["recipe_math"].iloc[0] == "fp8 torchao tensorwise"


def test_bad_transformer_arguments_are_one_line(tmp_path: Path, bench_main: Callable[..., Run]) -> None:
    assert_one_line_error(bench_main("--model", "gpt_tiny", "--precision", "fp32", "--batch-size", "2",
                                     "--dataset", "synthetic", "--seq-len", "129"),
                          "--seq-len 129 is longer than model gpt_tiny's context; allowed: at most 128")
    assert_one_line_error(bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "2",
                                     "--dataset", "synthetic", "--seq-len", "16"), "--seq-len applies to")
    (tmp_path / "d.npz").write_bytes(b"")
    assert_one_line_error(bench_main("--model", "gpt_tiny", "--precision", "fp32", "--batch-size", "2",
                                     "--dataset", f"npz:{tmp_path / 'd.npz'}"), "trains on tokens")
    assert_one_line_error(bench_main("--model", "gpt_tiny", "--precision", "fp32", "--batch-size", "2",
                                     "--dataset", f"text:{tmp_path / 'missing.txt'}"), "no such file")


MIXED = """
environments:
  - name: cpu
    backend: local
axes:
  model: [mnist_cnn, gpt_tiny]
  precision: [fp32]
  batch_size: [4]
  seq_len: [64]
"""


def test_plan_refuses_a_seq_len_on_an_image_model_naming_the_line() -> None:
    with pytest.raises(ConfigError) as e:
        matrix.parse(textwrap.dedent(MIXED), Path("m.yaml"))
    assert "m.yaml: axes.seq_len[0]" in str(e.value) and "seq_len applies to the transformer models" in str(e.value)
    fixed = MIXED + "exclude:\n  - {model: mnist_cnn, seq_len: 64}\n"
    cells = matrix.parse(textwrap.dedent(fixed), Path("m.yaml")).cells()
    assert [c.params["model"] for c in cells] == ["gpt_tiny"]
    argv = cells[0].bench_args()
    assert argv[argv.index("--seq-len") + 1] == "64"


def test_the_transformer_example_plans() -> None:
    m = matrix.load(Path(__file__).resolve().parents[2] / "examples" / "transformer.yaml")
    cells = m.cells()
    assert {c.params["precision"] for c in cells} >= {"fp32", "bf16", "amp-bf16", "fp8"}
    assert {c.params["model"] for c in cells} == {"gpt_tiny"}
    assert {c.params.get("compile") for c in cells} == {False, True}


def test_transformer_vs_reference_prints_both_sides_and_the_verdict(tmp_path: Path) -> None:
    out = tmp_path / "runs.json"
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "transformer_vs_reference.py"
    proc = subprocess.run([sys.executable, str(script), "--model", "gpt_tiny", "--batch-size", "2", "--seq-len", "16",
                           "--precision", "amp-bf16", "--device", "cpu", "--iterations", "3", "--warmup", "1",
                           "--repeats", "2", "--threads", "1", "--tolerance", "0.5", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1, 5), proc.stderr  # within, outside, not established: a judged measurement
    verdict = proc.stdout.strip().splitlines()[-1]
    assert re.match(r"bench / reference: \d\.\d{3}, (within 50%|outside 50%|not established)", verdict), verdict
    assert "interval" in verdict and "tok/s" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1].startswith("bench / reference: ")  # the verdict is the last line
    runs = json.loads(out.read_text())["runs"]
    assert len(runs["bench"]) == len(runs["reference"]) == 2
    assert all(r["tokens"] == 3 * 2 * 16 and r["throughput"] > 0 for r in runs["reference"])
    assert all(r["mfu"] > 0 for r in runs["bench"])


def test_run_summary_labels_throughput_with_the_results_unit() -> None:
    """`matrix run`'s summary said img/s for every cell: a transformer's tok/s, and a mix says each value's unit."""
    from runner import matrix as matrix_mod
    from runner.execution.printer import summary_table

    text = MIXED.replace("seq_len: [64]", "").replace("[mnist_cnn, gpt_tiny]", "[mlp, gpt_tiny]")
    cells = matrix_mod.parse(textwrap.dedent(text), Path("m.yaml")).cells()
    tok = {"throughput": 100.0, "definitions": {"throughput": {"how": "bench: tokens", "unit": "tok/s"}}}
    gpt_rows = [{"cell_key": cells[1].key, "status": "ok", "reason": None, "metrics": tok}]
    table = summary_table(cells[1:], StoredRepeat.many(gpt_rows))
    assert table.columns[-2] == "tok/s (mean ± std)" and table.rows[0][-2].text == "100.0"
    both = gpt_rows + [{"cell_key": cells[0].key, "status": "ok", "reason": None, "metrics": {"throughput": 5.0}}]
    table = summary_table(cells, StoredRepeat.many(both))
    assert table.columns[-2] == "throughput (mean ± std)"
    assert [row[-2].text for row in table.rows] == ["5.0 img/s", "100.0 tok/s"]


@pytest.mark.parametrize(("recipe", "grad_output"), [("tensorwise", "E5M2"), ("rowwise", "E4M3FN")])
def test_torchao_converts_every_linear_layer_and_keeps_the_tie(recipe: str, grad_output: str) -> None:
    """With torchao installed (skipped without it): the conversion bench applies on a GPU, checked on the CPU."""
    pytest.importorskip("torchao.float8")
    model = models.build_transformer("gpt_small").to(torch.bfloat16)
    model, record = fp8.convert(model, {"mechanism": "torchao", "fp8_recipe": recipe})
    assert record["fp8_layers"] == record["linear_layers"] == 4 * 4 + 1
    assert record["formats"] == f"input E4M3FN, weight E4M3FN, grad_output {grad_output}"
    assert type(model.head).__name__ == "Float8Linear" and model.head.weight is model.wte.weight
