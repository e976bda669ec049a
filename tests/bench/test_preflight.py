"""The architecture preflight with the probed values substituted: what torch.cuda reports (capability,
get_arch_list where it exists, torch.version.cuda) is faked at the one place bench reads it."""

from __future__ import annotations

import json
import types
from typing import Any

import pytest

from runner.bench import compat, errors, preflight
from runner.bench import main as bench_main_module

CU117_ARCHES = ["sm_37", "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86"]  # torch 1.13.1+cu117
CU12_ARCHES = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]    # torch 2.x+cu121


def fake_torch(capability: tuple[int, int], cuda: str, arch_list: list[str] | None) -> Any:
    """torch as bench's preflight sees it; `arch_list` None: a torch without get_arch_list (< 1.6)."""
    cuda_mod = types.SimpleNamespace(get_device_capability=lambda i: capability, current_device=lambda: 0)
    if arch_list is not None:
        cuda_mod.get_arch_list = lambda: list(arch_list)
    return types.SimpleNamespace(cuda=cuda_mod, version=types.SimpleNamespace(cuda=cuda))


CUDA0 = types.SimpleNamespace(type="cuda", index=0)


def features_with(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], cuda: str,
                  arch_list: list[str] | None) -> dict[str, Any]:
    monkeypatch.setattr(compat, "torch", fake_torch(capability, cuda, arch_list))
    feats = preflight.device_features(CUDA0)
    assert feats is not None
    return feats


def test_torch_1_0_cuda_9_on_sm_90_is_unsupported_with_the_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    feats = features_with(monkeypatch, (9, 0), "9.0.176", None)
    assert feats["runs"] is False and feats["built_for"] == ["sm_37", "sm_70"]
    with pytest.raises(errors.Unsupported) as e:
        preflight.check(feats)
    assert str(e.value).startswith("this PyTorch was built for sm_37..sm_70; this GPU is sm_90")
    assert "torch.version.cuda 9.0.176" in str(e.value)


def test_torch_1_13_cu117_on_sm_90_is_a_mismatch(monkeypatch: pytest.MonkeyPatch) -> None:
    feats = features_with(monkeypatch, (9, 0), "11.7", CU117_ARCHES)
    assert feats["runs"] is False and feats["built_for_source"] == "torch.cuda.get_arch_list()"
    with pytest.raises(errors.Unsupported) as e:
        preflight.check(feats)
    assert str(e.value) == "this PyTorch was built for sm_37..sm_86; this GPU is sm_90"


def test_torch_2_cu12_on_sm_90_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    feats = features_with(monkeypatch, (9, 0), "12.1", CU12_ARCHES)
    assert feats["runs"] is True and feats["ptx_jit"] is False
    preflight.check(feats)  # no exception
    assert feats["tensor_cores"] == {"fp16": True, "bf16": True, "tf32": True, "fp8": True}
    assert feats["capability"] == "9.0" and feats["sm"] == "sm_90"


@pytest.mark.parametrize("capability,arches,runs", [
    ((8, 6), ["sm_80"], True),               # same major, newer minor: the sm_80 code runs
    ((8, 0), ["sm_86"], False),              # code for a newer minor does not run on an older one
    ((9, 0), ["sm_80", "compute_80"], True),  # PTX the driver compiles for the newer GPU
    ((7, 0), ["sm_80", "compute_80"], False),  # PTX only runs on its own architecture or newer
    ((9, 0), ["sm_90a"], True),
    ((12, 0), ["sm_90", "sm_100", "sm_120"], True),
    ((3, 5), ["sm_50", "sm_90"], False),     # too old for this build
])
def test_which_builds_run_on_which_gpu(capability: tuple[int, int], arches: list[str], runs: bool) -> None:
    assert preflight.features(capability, arches, "12.1")["runs"] is runs


def test_ptx_only_is_recorded() -> None:
    feats = preflight.features((9, 0), ["sm_80", "compute_80"], "11.1")
    assert feats["runs"] is True and feats["ptx_jit"] is True


@pytest.mark.parametrize("cuda,capability,runs", [
    ("9.0", (7, 0), True), ("9.2", (7, 5), False), ("10.1", (7, 5), True), ("11.0", (8, 0), True),
    ("11.0", (8, 6), False), ("11.3", (8, 6), True), ("11.8", (9, 0), True), ("10.2", (6, 1), True),
])
def test_what_torch_version_cuda_implies(cuda: str, capability: tuple[int, int], runs: bool) -> None:
    assert preflight.features(capability, None, cuda)["runs"] is runs


def test_unknown_builds_are_not_refused() -> None:
    feats = preflight.features((9, 0), None, None)
    assert feats["runs"] is None and preflight.mismatch(feats) is None


@pytest.mark.parametrize("precision,capability,unit,native", [
    ("fp32", (6, 1), "fp32 cores", True),
    ("fp16", (6, 1), "no fp16 tensor cores (sm_61)", False),
    ("amp", (6, 0), "no fp16 tensor cores (sm_60)", False),
    ("amp", (7, 0), "fp16 tensor cores", True),
    ("tf32", (8, 0), "tf32 tensor cores", True),
    ("bf16", (9, 0), "bf16 tensor cores", True),
    ("amp-bf16", (7, 5), "no bf16 tensor cores (sm_75)", False),
])
def test_what_each_precision_ran_on(precision: str, capability: tuple[int, int], unit: str, native: bool) -> None:
    rec = preflight.native_units(precision, preflight.features(capability, None, "12.1"))
    assert rec == {"device": "cuda", "unit": unit, "native": native}
    assert preflight.native_units("fp16", None) == {"device": None, "unit": None, "native": None}


def test_fp8_tensor_cores_from_ada_on() -> None:
    assert preflight.tensor_cores((8, 9))["fp8"] is True and preflight.tensor_cores((8, 6))["fp8"] is False


def test_bench_reports_the_mismatch_as_unsupported_before_training(monkeypatch: pytest.MonkeyPatch,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """The wiring in bench's main: the GPU's record is in env, the status unsupported with the sentence."""
    feats = preflight.features((9, 0), None, "9.0")
    monkeypatch.setattr(preflight, "device_features", lambda device: feats)
    code = bench_main_module.main(["--model", "mlp", "--precision", "fp16", "--batch-size", "8", "--dataset",
                                   "synthetic", "--iterations", "2", "--warmup", "0", "--device", "cpu"])
    r = json.loads(capfd.readouterr().out.splitlines()[-1][len("MATRIX_RESULT "):])
    assert code == 4 and r["status"] == "unsupported"
    assert r["reason"].startswith("this PyTorch was built for sm_37..sm_70; this GPU is sm_90")
    assert r["env"]["device_features"]["sm"] == "sm_90" and r["metrics"]["throughput"] is None
