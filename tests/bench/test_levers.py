"""The speed levers as parts of a cell's definition (bench's --optimizer-impl, --compile-mode, --cuda-graphs):
recorded with the result, refused in one line where two options cannot go together, and `unsupported` with one
sentence where this torch or device lacks one (on this CPU: CUDA graphs)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from runner import matrix
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
