"""The benchmark against real PyTorch on CPU: the command line, the result contract, and the numbers.

Runs go through runner.bench.main.main() in this process (no torch import per run) or, where the
process is the point (exit statuses, a clean stdout, other interpreters, two ranks), through a fresh
`python bench-<hash>.pyz` as the backends start it. Precision selection is also tested with faked
capabilities, since this machine has no GPU.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import socket
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch  # the venv's CPU build: pip install -e '.[local,dev]'
from sklearn.datasets import load_digits

from runner.backends import artifact
from runner.bench import args as bench_args
from runner.bench import data, distributed, errors, models, result, training
from runner.bench import main as bench_main_module
from runner.bench import precision as recipes
from tests.conftest import require


def _pyenv_root() -> Path:
    if os.environ.get("PYENV_ROOT"):
        return Path(os.environ["PYENV_ROOT"])
    try:
        out = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    return Path(out) if out else Path("/root/.pyenv")


PY36 = _pyenv_root() / "versions" / "3.6.15" / "bin" / "python3.6"
SYSTEM_PYTHON = "/usr/bin/python3"
FAST = ["--threads", "1", "--workers", "0"]  # 2-core CI: OpenMP spinning across processes is slow


BENCH_PATH = artifact.path()  # the zipapp, as every backend runs it


class Run:
    """One finished benchmark run: exit status, stdout, stderr."""

    def __init__(self, rc: int, stdout: str, stderr: str) -> None:
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr

    @property
    def result(self) -> dict[str, Any]:
        """The one result line, decoded strictly (NaN/Infinity are not JSON)."""
        lines = self.stdout.splitlines()
        assert len(lines) == 1 and lines[0].startswith("MATRIX_RESULT "), (
            f"stdout must be exactly one result line, got {self.stdout!r}; stderr: {self.stderr[-2000:]}")

        def reject(const: str) -> None:
            raise AssertionError(f"non-JSON constant {const} in result")

        return json.loads(lines[0][len("MATRIX_RESULT "):], parse_constant=reject)


def run_bench(*args: str, python: str = sys.executable, env: dict[str, str] | None = None,
              timeout: float = 120) -> Run:
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_PROCID")}
    full_env.update(env or {})
    proc = subprocess.run([python, str(BENCH_PATH), *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def bench_main(capfd: pytest.CaptureFixture[str]) -> Callable[..., Run]:
    """runner.bench.main.main() in this process: the same code without paying a torch import per run.
    The process-level contract (exit statuses, a clean stdout) has its own subprocess tests."""

    def call(*args: str) -> Run:
        capfd.readouterr()
        try:
            code = bench_main_module.main(list(args))
        except SystemExit as e:  # argparse: --help and its own errors
            code = int(e.code or 0)
        out, err = capfd.readouterr()
        return Run(code, out, err)

    return call


def assert_one_line_error(run: Run, *needles: str) -> None:
    assert run.rc == 2, run.stderr
    assert run.stdout == ""
    lines = [ln for ln in run.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, run.stderr
    assert "Traceback" not in run.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def digits_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scikit-learn's 8x8 digits as uint8 N,H,W images (0..255), 1400 train / 397 test."""
    digits = load_digits()
    x = np.clip(digits.images * 16, 0, 255).astype(np.uint8)
    y = digits.target.astype(np.int64)
    order = np.random.RandomState(0).permutation(len(y))
    x, y = x[order], y[order]
    path = tmp_path_factory.mktemp("digits") / "digits.npz"
    np.savez(path, x_train=x[:1400], y_train=y[:1400], x_test=x[1400:], y_test=y[1400:])
    return path


@pytest.fixture
def no_torchvision(tmp_path: Path) -> dict[str, str]:
    """PYTHONPATH that makes `import torchvision` fail, whatever the venv holds."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "torchvision.py").write_text("raise ImportError('torchvision blocked for this test')\n")
    return {"PYTHONPATH": str(blocker)}


# ----------------------------------------------------------------------------- training end to end

MODEL_ARGS = {
    "mlp": ["--batch-size", "8"],
    "mnist_cnn": ["--batch-size", "4"],
    "cifar_vgg16": ["--batch-size", "2"],
    "wrn": ["--batch-size", "2", "--wrn-depth", "10", "--wrn-width", "1"],
}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("model", sorted(MODEL_ARGS))
def test_builtin_model_trains(model: str, precision: str, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", model, "--precision", precision, "--dataset", "synthetic",
                    "--iterations", "3", "--warmup", "1", *MODEL_ARGS[model], *FAST)
    assert run.rc == 0, run.stderr
    r = run.result
    m = r["metrics"]
    assert r["schema"] == 1 and r["status"] == "ok" and r["reason"] is None
    assert r["params"]["model"] == model and r["params"]["precision"] == precision
    batch = int(MODEL_ARGS[model][1])
    assert m["images"] == 3 * batch
    assert m["throughput"] > 0
    assert m["throughput"] == pytest.approx(m["images"] / m["window_s"])
    assert len(m["iter_times"]) == 3 and all(t > 0 for t in m["iter_times"])
    assert sum(m["iter_times"]) == pytest.approx(m["window_s"], rel=0.05, abs=0.005)
    assert math.isfinite(m["loss_start"]) and math.isfinite(m["loss_end"])
    assert 0.5 < m["loss_start"] < 10  # cross-entropy of an untrained 10-class model, ~ln(10)
    assert m["world_size"] == 1 and m["accuracy"] is None
    assert m["peak_mem_allocated"] is None and m["device_mem_used"] is None  # CPU
    p = r["precision"]
    assert p["dtype"] == {"fp32": "float32", "bf16": "bfloat16"}[precision]
    assert p["mechanism"] == "none" and p["tf32_matmul"] is None and p["compile"] is False
    assert r["env"]["device"] == "cpu" and r["env"]["torch"] == torch.__version__
    assert r["workload"]["num_classes"] == 10


def test_amp_bf16_runs_with_cpu_autocast(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mnist_cnn", "--precision", "amp-bf16", "--batch-size", "4",
                    "--dataset", "synthetic", "--iterations", "2", "--warmup", "1", *FAST)
    assert run.rc == 0, run.stderr
    p = run.result["precision"]
    assert (p["mechanism"], p["dtype"], p["autocast"], p["loss_scale"]) == ("native", "bfloat16", True, None)


def test_result_records_options_env_and_breakdown() -> None:
    run = run_bench("--model", "mlp", "--precision", "fp32", "--batch-size", "16", "--dataset", "synthetic",
                    "--iterations", "6", "--warmup", "2", "--seed", "3", "--channels-last", "--breakdown",
                    "--image-size", "12", "--num-classes", "7", *FAST,
                    env={"NCCL_DEBUG": "WARN", "CUDA_VISIBLE_DEVICES": ""})
    assert run.rc == 0, run.stderr
    r = run.result
    assert r["params"]["seed"] == 3 and r["params"]["channels_last"] is True
    assert r["precision"]["channels_last"] is True and r["precision"]["cudnn_benchmark"] is None
    assert r["workload"]["input_shape"] == [1, 12, 12] and r["workload"]["num_classes"] == 7
    bd = r["metrics"]["breakdown"]
    phases = bd["forward_s"] + bd["backward_s"] + bd["optimizer_s"]
    assert bd["synchronized_per_phase"] is True
    assert 0 < phases <= r["metrics"]["window_s"]
    env = r["env"]
    assert env["env_vars"] == {"CUDA_VISIBLE_DEVICES": "", "NCCL_DEBUG": "WARN"}
    for key in ("python", "torch", "cuda", "cudnn", "torchvision", "apex", "numpy", "device", "device_name",
                "device_count", "capability", "driver", "cpu", "hostname", "container", "slurm_job_id"):
        assert key in env
    assert env["numpy"] == np.__version__ and env["device_count"] == 0


def test_same_seed_same_losses_other_seed_differs(bench_main: Callable[..., Run]) -> None:
    def losses(seed: str) -> list[float]:
        run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "8", "--dataset", "synthetic",
                        "--iterations", "4", "--warmup", "0", "--seed", seed, *FAST)
        assert run.rc == 0, run.stderr
        return run.result["metrics"]["losses"]

    first = losses("1")
    assert first == losses("1")
    assert first != losses("2")


def test_zero_iterations_synthetic(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "4", "--dataset", "synthetic",
                    "--iterations", "0", "--warmup", "0", *FAST)
    assert run.rc == 0, run.stderr
    m = run.result["metrics"]
    assert m["throughput"] is None and m["images"] == 0 and m["iter_times"] == []
    assert m["loss_start"] is None and m["loss_end"] is None


def test_diverging_loss_is_null_not_nan(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "16", "--dataset", "synthetic",
                    "--iterations", "5", "--warmup", "0", "--lr", "1e20", *FAST)
    assert run.rc == 5, run.stderr  # diverged (tests/bench/test_admission.py)
    r = run.result
    m = r["metrics"]  # strict parse: no NaN constants
    assert r["status"] == "diverged"
    assert m["loss_start"] is not None and None in m["losses"] and m["loss_end"] is None


# ----------------------------------------------------------------------------- real data, real learning

def test_digits_learn_far_above_chance(digits_npz: Path, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "64",
                    "--dataset", f"npz:{digits_npz}", "--iterations", "150", "--warmup", "0", "--lr", "0.05",
                    "--threads", "1", "--workers", "1")
    assert run.rc == 0, run.stderr
    r = run.result
    m = r["metrics"]
    assert m["accuracy"] > 0.8, m["accuracy"]
    assert m["loss_end"] < m["loss_start"] / 2
    assert 0 <= m["data_wait_s"] < m["window_s"]
    # 150 x 64 samples from 1400: the loader ran out and restarted several epochs.
    assert r["workload"]["train_samples"] == 1400 and r["workload"]["test_samples"] == 397
    assert r["workload"]["input_shape"] == [1, 8, 8]  # N,H,W uint8 -> N,1,8,8 float


def test_digits_untrained_is_near_chance(digits_npz: Path, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "64",
                    "--dataset", f"npz:{digits_npz}", "--iterations", "0", "--warmup", "0", *FAST)
    assert run.rc == 0, run.stderr
    m = run.result["metrics"]
    assert m["accuracy"] is not None and m["accuracy"] < 0.3
    assert m["throughput"] is None


def test_eval_batches_caps_evaluation(digits_npz: Path, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "50", "--dataset",
                    f"npz:{digits_npz}", "--iterations", "1", "--warmup", "0", "--eval-batches", "1", *FAST)
    assert run.rc == 0, run.stderr
    acc = run.result["metrics"]["accuracy"]
    assert acc is not None and abs(acc * 50 - round(acc * 50)) < 1e-9  # a multiple of 1/50: one batch


def test_cifar10_pickle_batches(tmp_path: Path, bench_main: Callable[..., Run]) -> None:
    rng = np.random.RandomState(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for name in names:
        batch = {b"data": rng.randint(0, 256, size=(8, 3072)).astype(np.uint8),
                 b"labels": list(rng.randint(0, 10, size=8))}
        with open(root / name, "wb") as f:
            pickle.dump(batch, f)
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "16", "--dataset",
                    f"cifar10:{tmp_path}", "--iterations", "4", "--warmup", "1", *FAST)
    assert run.rc == 0, run.stderr
    r = run.result
    assert r["workload"]["input_shape"] == [3, 32, 32]
    assert r["workload"]["train_samples"] == 40 and r["workload"]["test_samples"] == 8
    assert r["metrics"]["accuracy"] is not None


def test_npz_channels_last_layout_and_float(tmp_path: Path, bench_main: Callable[..., Run]) -> None:
    rng = np.random.RandomState(0)
    path = tmp_path / "nhwc.npz"
    np.savez(path, x_train=rng.rand(32, 10, 10, 3).astype(np.float64), y_train=rng.randint(0, 4, 32),
             x_test=rng.rand(8, 10, 10, 3), y_test=rng.randint(0, 4, 8))
    run = bench_main("--model", "wrn", "--wrn-depth", "10", "--wrn-width", "1", "--precision", "fp32",
                    "--batch-size", "8", "--dataset", f"npz:{path}", "--iterations", "2", "--warmup", "0", *FAST)
    assert run.rc == 0, run.stderr
    w = run.result["workload"]
    assert w["input_shape"] == [3, 10, 10] and w["num_classes"] == 4


# ----------------------------------------------------------------------------- statuses and exit codes

@pytest.mark.parametrize("precision,needle", [("fp16", "fp16"), ("tf32", "tf32"), ("amp", "amp")])
def test_gpu_only_precisions_are_unsupported_on_cpu(precision: str, needle: str, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mlp", "--precision", precision, "--batch-size", "4", "--dataset", "synthetic",
                    "--iterations", "1", "--warmup", "0", "--device", "cpu", *FAST)
    assert run.rc == 4, run.stderr
    r = run.result
    assert r["status"] == "unsupported" and needle in r["reason"] and "CPU" in r["reason"]
    assert r["env"]["torch"] == torch.__version__ and r["metrics"]["throughput"] is None
    assert "Traceback" not in run.stderr


def test_torchvision_model_without_torchvision_is_unsupported(no_torchvision: dict[str, str]) -> None:
    run = run_bench("--model", "resnet50", "--precision", "fp32", "--batch-size", "2", "--dataset", "synthetic",
                    "--iterations", "1", "--warmup", "0", *FAST, env=no_torchvision)
    assert run.rc == 4, run.stderr
    r = run.result
    assert r["status"] == "unsupported" and "torchvision" in r["reason"]
    assert r["env"]["torchvision"] is None


def test_imagefolder_without_torchvision_is_unsupported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        bench_main: Callable[..., Run]) -> None:
    for name in ("torchvision", "torchvision.datasets", "torchvision.transforms", "torchvision.models"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "2", "--dataset",
                     f"imagefolder:{tmp_path}", "--iterations", "1", "--warmup", "0", *FAST)
    assert run.rc == 4, run.stderr
    assert "torchvision" in run.result["reason"]


def test_unknown_model_is_a_bad_argument() -> None:
    run = run_bench("--model", "resnet9000", "--precision", "fp32", "--batch-size", "2", "--dataset", "synthetic")
    assert_one_line_error(run, "unknown model", "resnet9000", "mnist_cnn")


@pytest.mark.parametrize("dataset,needle", [
    ("npz:/nonexistent/data.npz", "no such file"),
    ("cifar10:/nonexistent/dir", "no such directory"),
    ("imagefolder:/nonexistent/dir", "no such directory"),
    ("mnist", "expected synthetic"),
])
def test_bad_data_path_is_a_bad_argument(dataset: str, needle: str, bench_main: Callable[..., Run]) -> None:
    run = bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "2", "--dataset", dataset)
    assert_one_line_error(run, needle)


def test_unreadable_npz_is_a_bad_argument(tmp_path: Path, bench_main: Callable[..., Run]) -> None:
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not a zip file")
    assert_one_line_error(bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "2",
                                    "--dataset", f"npz:{broken}", *FAST), "cannot be read")
    partial = tmp_path / "partial.npz"
    np.savez(partial, x_train=np.zeros((4, 8, 8), np.uint8), y_train=np.zeros(4))
    assert_one_line_error(bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "2",
                                    "--dataset", f"npz:{partial}", *FAST), "x_test")


def test_dataset_smaller_than_batch_is_a_bad_argument(digits_npz: Path, bench_main: Callable[..., Run]) -> None:
    assert_one_line_error(bench_main("--model", "mlp", "--precision", "fp32", "--batch-size", "5000",
                                    "--dataset", f"npz:{digits_npz}", *FAST), "fewer than --batch-size")


@pytest.mark.parametrize("args,needle", [
    (["--precision", "fp4"], "invalid choice"),
    (["--batch-size", "0"], "--batch-size"),
    (["--iterations", "-1"], "--iterations"),
    (["--model", "wrn", "--wrn-depth", "12"], "6n+4"),
    (["--batch-size", "many"], "invalid int"),
])
def test_argument_errors_exit_2_with_one_line(args: list[str], needle: str, bench_main: Callable[..., Run]) -> None:
    base = {"--model": "mlp", "--precision": "fp32", "--batch-size": "2", "--dataset": "synthetic"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = [x for kv in base.items() for x in kv]
    assert_one_line_error(bench_main(*argv), needle)


def test_missing_required_option_exits_2(bench_main: Callable[..., Run]) -> None:
    assert_one_line_error(bench_main("--model", "mlp"), "required")


def test_help_works(bench_main: Callable[..., Run]) -> None:
    run = bench_main("--help")
    assert run.rc == 0
    for option in ("--amp-impl", "--loss-scale", "--wrn-depth", "--eval-batches", "--breakdown"):
        assert option in run.stdout


def test_host_out_of_memory_is_status_oom() -> None:
    run = run_bench("--model", "mlp", "--precision", "fp32", "--batch-size", "1000000000", "--dataset",
                    "synthetic", "--iterations", "1", "--warmup", "0", *FAST)
    assert run.rc == 3, run.stderr
    r = run.result
    assert r["status"] == "oom" and "allocate" in r["reason"]
    assert "Traceback" not in run.stderr
    assert r["metrics"]["host_peak_rss"] > 0


def test_unexpected_failure_is_status_failed_exit_1(monkeypatch: pytest.MonkeyPatch,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    def explode(*_a: Any, **_k: Any) -> None:
        raise ValueError("something nobody planned for")

    monkeypatch.setattr(models, "build_model", explode)
    code = bench_main_module.main(["--model", "mlp", "--precision", "fp32", "--batch-size", "2", "--dataset", "synthetic",
                       "--threads", "1"])
    out, err = capfd.readouterr()
    assert code == 1
    assert "Traceback" in err and "something nobody planned for" in err
    lines = out.splitlines()
    assert len(lines) == 1
    result = json.loads(lines[0].split(" ", 1)[1])
    assert result["status"] == "failed" and "ValueError: something nobody planned for" == result["reason"]


def test_stray_prints_go_to_stderr(monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    """A library printing to stdout (apex, NCCL) must not break the one-line contract."""
    real = models.build_model

    def noisy(*a: Any, **k: Any) -> Any:
        print("Selected optimization level O1")  # what apex prints
        os.write(1, b"NCCL INFO from C\n")
        return real(*a, **k)

    monkeypatch.setattr(models, "build_model", noisy)
    code = bench_main_module.main(["--model", "mlp", "--precision", "fp32", "--batch-size", "2", "--dataset", "synthetic",
                       "--iterations", "1", "--warmup", "0", "--threads", "1"])
    out, err = capfd.readouterr()
    assert code == 0
    assert out.count("\n") == 1 and out.startswith("MATRIX_RESULT ")
    assert "Selected optimization level O1" in err and "NCCL INFO from C" in err


# ----------------------------------------------------------------------------- precision selection logic

def args_for(precision: str, amp_impl: str = "auto", **extra: Any) -> Any:
    argv = ["--model", "mlp", "--precision", precision, "--batch-size", "2", "--dataset", "synthetic",
            "--amp-impl", amp_impl]
    args = bench_args.parse_args(argv)
    for k, v in extra.items():
        setattr(args, k, v)
    return args


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A 'cuda' device whose capability the test chooses; nothing touches a real GPU."""
    capability = {"value": (8, 0)}
    monkeypatch.setattr(recipes, "_capability", lambda device: capability["value"])
    return capability


@pytest.fixture
def fake_apex(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    apex = types.ModuleType("apex")
    amp = types.ModuleType("apex.amp")
    amp.initialize = lambda model, optimizer, **kw: (model, optimizer)  # type: ignore[attr-defined]
    apex.amp = amp  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "apex", apex)
    monkeypatch.setitem(sys.modules, "apex.amp", amp)
    return amp


def test_choose_amp_impl_fallback_chain() -> None:
    assert recipes.choose_amp_impl("auto", {"native": True, "apex": True}) == "native"
    assert recipes.choose_amp_impl("auto", {"native": False, "apex": True}) == "apex"
    assert recipes.choose_amp_impl("auto", {"native": False, "apex": False}) == "manual"
    assert recipes.choose_amp_impl("manual", {"native": True, "apex": True}) == "manual"
    assert recipes.choose_amp_impl("apex", {"native": True, "apex": True}) == "apex"
    with pytest.raises(errors.Unsupported, match="apex"):
        recipes.choose_amp_impl("apex", {"native": True, "apex": False})
    with pytest.raises(errors.Unsupported, match="native"):
        recipes.choose_amp_impl("native", {"native": False, "apex": True})


def test_amp_capabilities_probe_features(monkeypatch: pytest.MonkeyPatch, fake_apex: types.ModuleType) -> None:
    old_torch = types.SimpleNamespace(cuda=types.SimpleNamespace())  # torch 0.4: no torch.cuda.amp
    assert recipes.amp_capabilities(old_torch) == {"native": False, "apex": True}
    assert recipes.amp_capabilities(torch)["native"] is True
    monkeypatch.setitem(sys.modules, "apex.amp", None)  # import of apex.amp now fails
    assert recipes.amp_capabilities(old_torch) == {"native": False, "apex": False}


def test_plan_amp_native_apex_manual(fake_gpu: Any, fake_apex: types.ModuleType) -> None:
    cuda = torch.device("cuda", 0)
    native = recipes.plan_precision(args_for("amp"), cuda, {"native": True, "apex": True})
    assert native["mechanism"] == "native" and native["loss_scale"] == "dynamic"
    assert native["autocast"] is not None and native["model_dtype"] is None
    apex = recipes.plan_precision(args_for("amp"), cuda, {"native": False, "apex": True})
    assert apex["mechanism"] == "apex" and apex["autocast"] is None
    manual = recipes.plan_precision(args_for("amp", loss_scale=128.0), cuda, {"native": False, "apex": False})
    assert manual["mechanism"] == "manual" and manual["loss_scale"] == 128.0
    assert manual["model_dtype"] == torch.float16 and manual["input_dtype"] == torch.float16
    assert manual["bn_fp32"] is True
    with pytest.raises(errors.Unsupported, match="apex"):
        recipes.plan_precision(args_for("amp", "apex"), cuda, {"native": True, "apex": False})


def test_plan_tf32_and_bf16_need_ampere(fake_gpu: Any) -> None:
    cuda = torch.device("cuda", 0)
    fp32 = recipes.plan_precision(args_for("fp32"), cuda, {})
    assert fp32["tf32"] is False  # fp32 on a GPU switches TF32 off
    assert recipes.plan_precision(args_for("tf32"), cuda, {})["tf32"] is True
    assert recipes.plan_precision(args_for("bf16"), cuda, {})["model_dtype"] == torch.bfloat16
    fake_gpu["value"] = (7, 0)  # V100
    for precision in ("tf32", "bf16", "amp-bf16"):
        with pytest.raises(errors.Unsupported, match="7.0"):
            recipes.plan_precision(args_for(precision), cuda, {})
    fp16 = recipes.plan_precision(args_for("fp16"), cuda, {})
    assert fp16["model_dtype"] == torch.float16 and fp16["mechanism"] == "none"


def test_plan_amp_bf16_is_native_only(fake_gpu: Any) -> None:
    cuda = torch.device("cuda", 0)
    assert recipes.plan_precision(args_for("amp-bf16"), cuda, {})["mechanism"] == "native"
    with pytest.raises(errors.Unsupported, match="native"):
        recipes.plan_precision(args_for("amp-bf16", "manual"), cuda, {})


def test_plan_cpu() -> None:
    cpu = torch.device("cpu")
    assert recipes.plan_precision(args_for("fp32"), cpu)["tf32"] is None
    bf16 = recipes.plan_precision(args_for("amp-bf16"), cpu)
    assert bf16["autocast"] is not None and bf16["dtype"] == "bfloat16"
    for precision in ("fp16", "tf32", "amp"):
        with pytest.raises(errors.Unsupported):
            recipes.plan_precision(args_for(precision), cpu)


@pytest.fixture
def restore_backend_flags() -> Any:
    yield
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's defaults, set through the legacy API
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = False


def test_backend_flags_fp32_means_fp32(fake_gpu: Any, restore_backend_flags: Any) -> None:
    cuda = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    fp32 = recipes.apply_backend_flags(recipes.plan_precision(args_for("fp32"), cuda, {}), args_for("fp32"), cuda)
    assert fp32 == {"tf32_matmul": False, "tf32_cudnn": False, "cudnn_benchmark": False}
    assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
    tf32_args = args_for("tf32", cudnn_benchmark=True)
    tf32 = recipes.apply_backend_flags(recipes.plan_precision(tf32_args, cuda, {}), tf32_args, cuda)
    assert tf32 == {"tf32_matmul": True, "tf32_cudnn": True, "cudnn_benchmark": True}
    assert torch.backends.cudnn.benchmark is True


def test_backend_flags_survive_the_new_fp32_precision_api(fake_gpu: Any, restore_backend_flags: Any) -> None:
    """An environment that set torch's newer fp32_precision API makes the legacy getters raise."""
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("this torch has no fp32_precision API")
    cuda = torch.device("cuda", 0)
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    amp_args = args_for("amp")
    amp = recipes.apply_backend_flags(recipes.plan_precision(amp_args, cuda, {"native": True}), amp_args, cuda)
    assert amp["tf32_matmul"] is None  # unknowable through the legacy API, not a crash
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    fp32 = recipes.apply_backend_flags(recipes.plan_precision(args_for("fp32"), cuda, {}), args_for("fp32"), cuda)
    assert fp32["tf32_matmul"] is False and torch.backends.cuda.matmul.fp32_precision == "ieee"


# ----------------------------------------------------------------------------- manual master weights

def _tiny_model(seed: int = 0) -> Any:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))


def test_manual_master_weights_match_plain_sgd_in_fp32() -> None:
    """With FP32 standing in for FP16, scaling then unscaling must give exactly plain SGD's trajectory."""
    plain, mixed = _tiny_model(), _tiny_model()
    x = torch.randn(16, 6)
    y = torch.randint(0, 3, (16,))
    cpu = torch.device("cpu")
    args = args_for("fp32", lr=0.1)
    plan = {"autocast": None, "model_dtype": None}
    opt_plain = training.make_optimizer(plain.parameters(), args, cpu, allow_fused=False)[0]
    steps_plain = training.make_steps(plain, opt_plain, plan, None, None, None)
    master = recipes.ManualMasterWeights(mixed.parameters(), loss_scale=1024.0)
    opt_mixed = training.make_optimizer(master.master_params, args, cpu, allow_fused=False)[0]
    steps_mixed = training.make_steps(mixed, opt_mixed, plan, master, None, None)
    for _ in range(5):
        for forward, backward, update in (steps_plain, steps_mixed):
            backward(forward(x, y))
            update()
    for p, q, m in zip(plain.parameters(), mixed.parameters(), master.master_params, strict=True):
        assert torch.allclose(p, q, atol=1e-6) and torch.allclose(q, m)
    assert all(m is not q for m, q in zip(master.master_params, mixed.parameters(), strict=True))


def test_manual_master_weights_keep_updates_too_small_for_the_model_dtype() -> None:
    """Why masters exist: updates below the low-precision spacing accumulate in FP32 and show up
    in the model once they add up, where plain low-precision SGD never moves."""
    model = torch.nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        model.weight.fill_(1.0)
    master = recipes.ManualMasterWeights(model.parameters(), loss_scale=256.0)
    assert master.master_params[0].dtype == torch.float32
    optimizer = torch.optim.SGD(master.master_params, lr=5e-4)
    x = torch.ones(1, 1, dtype=torch.bfloat16)
    seen = []
    for _ in range(6):
        loss = model(x).float().sum()  # d loss / d w = 1
        master.backward(loss)
        grad = model.weight.grad
        assert grad is not None and grad.item() == pytest.approx(256.0)  # the model sees scaled gradients
        master.grads_to_master()
        assert master.master_params[0].grad.item() == pytest.approx(1.0)  # masters see true ones
        optimizer.step()
        master.master_to_model()
        master.zero_grad()
        seen.append(model.weight.item())
    assert master.master_params[0].item() == pytest.approx(1 - 6 * 5e-4, abs=1e-6)
    assert seen[2] == 1.0  # 0.9985 is still 1.0 in bf16 (spacing 2**-8 below 1)
    assert seen[5] == 1 - 2 ** -8  # 0.997 is not

    plain = torch.nn.Parameter(torch.ones(1, dtype=torch.bfloat16))
    plain_opt = torch.optim.SGD([plain], lr=5e-4)
    for _ in range(6):
        plain.grad = torch.ones(1, dtype=torch.bfloat16)
        plain_opt.step()
    assert plain.item() == 1.0


# ----------------------------------------------------------------------------- small helpers

def test_sanitize_replaces_non_finite() -> None:
    clean = result.sanitize({"a": float("nan"), "b": [1.0, float("inf"), -float("inf")], "c": (1, "x", None)})
    assert clean == {"a": None, "b": [1.0, None, None], "c": [1, "x", None]}
    json.dumps(clean, allow_nan=False)


def test_oom_and_dtype_gap_classification() -> None:
    assert errors.is_oom(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert errors.is_oom(torch.cuda.OutOfMemoryError("CUDA error: out of memory"))
    assert not errors.is_oom(RuntimeError("size mismatch"))
    assert errors.is_dtype_gap(RuntimeError('"slow_conv2d_cpu" not implemented for \'Half\''))
    assert not errors.is_dtype_gap(RuntimeError("not implemented for 'Long'"))


def test_to_nchw_layouts() -> None:
    assert data._to_nchw(np, np.zeros((2, 5, 6)), "x").shape == (2, 1, 5, 6)
    assert data._to_nchw(np, np.zeros((2, 5, 6, 3)), "x").shape == (2, 3, 5, 6)
    assert data._to_nchw(np, np.zeros((2, 3, 5, 6)), "x").shape == (2, 3, 5, 6)
    assert data._to_nchw(np, np.zeros((2, 1, 28, 28)), "x").shape == (2, 1, 28, 28)
    with pytest.raises(errors.BadArgs):
        data._to_nchw(np, np.zeros((2, 64)), "x")


def test_dist_layout_env_and_slurm_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.dist_layout() == (0, 1, 0)
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert distributed.dist_layout() == (0, 1, 0)
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    assert distributed.dist_layout() == (3, 4, 1)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert distributed.dist_layout() == (2, 8, 0)  # torchrun's variables win


# ----------------------------------------------------------------------------- other interpreters, other ranks

def test_every_module_compiles_and_the_zipapp_runs_under_python36(tmp_path: Path) -> None:
    require(PY36.exists(), f"{PY36} not installed (pyenv install 3.6.15)")
    modules = [str(p) for p in artifact.sources()]
    assert len(modules) >= 10
    proc = subprocess.run([str(PY36), "-c", "import py_compile, sys, os\n"
                           "for i, f in enumerate(sys.argv[2:]):\n"
                           "    py_compile.compile(f, cfile=os.path.join(sys.argv[1], '%d.pyc' % i), doraise=True)",
                           str(tmp_path), *modules], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(list(tmp_path.glob("*.pyc"))) == len(modules)
    # And the zipapp runs there: -S hides site-packages, so torch is missing and that is the answer.
    proc = subprocess.run([str(PY36), "-S", str(BENCH_PATH), "--model", "mlp", "--precision", "fp32",
                           "--batch-size", "2", "--dataset", "synthetic"], capture_output=True, text=True,
                          timeout=60)
    run = Run(proc.returncode, proc.stdout, proc.stderr)
    assert run.rc == 4, run.stderr
    r = run.result
    assert r["status"] == "unsupported" and "torch is not importable" in r["reason"]
    assert r["env"]["python"] == "3.6.15" and r["schema"] == 1
    bad = subprocess.run([str(PY36), "-S", str(BENCH_PATH), "--model", "mlp"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.strip().splitlines()) == 1
    helped = subprocess.run([str(PY36), "-S", str(BENCH_PATH), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--wrn-depth" in helped.stdout, helped.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_process_gloo_run(digits_npz: Path) -> None:
    port = str(_free_port())
    argv = [sys.executable, str(BENCH_PATH), "--model", "mlp", "--precision", "fp32", "--batch-size", "32",
            "--dataset", f"npz:{digits_npz}", "--iterations", "20", "--warmup", "2", "--lr", "0.05", *FAST]
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        outs.append((proc.returncode, out, err))
    (rc0, out0, err0), (rc1, out1, err1) = outs
    assert rc0 == 0 and rc1 == 0, err0[-2000:] + err1[-2000:]
    assert out1 == ""  # only rank 0 reports
    r = Run(rc0, out0, err0).result
    m = r["metrics"]
    assert r["status"] == "ok" and m["world_size"] == 2
    assert m["images"] == 2 * 20 * 32  # global, both ranks
    assert m["throughput"] == pytest.approx(m["images"] / m["window_s"])
    assert m["accuracy"] is not None and m["accuracy"] > 0.3  # sharded eval, summed over ranks
    assert r["precision"]["ddp"] == "DistributedDataParallel"


def _probe(python: str, code: str) -> bool:
    if not os.path.exists(python):
        return False
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _other_pythons() -> list[str]:
    """Interpreters with their own, older PyTorch: Debian's /usr/bin/python3 when it has torch, plus
    those named in MATRIX_TEST_PYTHONS (os.pathsep-separated, e.g. a Python 3.6 + torch 1.0 venv)."""
    named = [p for p in os.environ.get("MATRIX_TEST_PYTHONS", "").split(os.pathsep) if p]
    return ([SYSTEM_PYTHON] if _probe(SYSTEM_PYTHON, "import torch") else []) + named


@pytest.mark.parametrize("python", _other_pythons() or ["(none)"])
def test_same_file_runs_on_another_torch(python: str, digits_npz: Path) -> None:
    """The 2018-era promise: the one file trains, evaluates and says unsupported on another torch."""
    if python == "(none)":
        pytest.skip(f"no other Python with torch: {SYSTEM_PYTHON} lacks it (apt install python3-torch) "
                    "and MATRIX_TEST_PYTHONS is unset")
    assert _probe(python, "import torch"), f"{python} cannot import torch"
    ok = run_bench("--model", "wrn", "--wrn-depth", "10", "--wrn-width", "1", "--precision", "fp32",
                   "--batch-size", "4", "--dataset", "synthetic", "--iterations", "3", "--warmup", "1", *FAST,
                   python=python, timeout=300)
    assert ok.rc == 0, ok.stderr
    assert ok.result["status"] == "ok" and ok.result["metrics"]["throughput"] > 0
    assert ok.result["env"]["python"] == subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True, text=True).stdout.strip()
    learn = run_bench("--model", "mnist_cnn", "--precision", "fp32", "--batch-size", "64", "--dataset",
                      f"npz:{digits_npz}", "--iterations", "100", "--warmup", "0", "--lr", "0.05", *FAST,
                      python=python, timeout=300)
    assert learn.rc == 0, learn.stderr
    assert learn.result["metrics"]["accuracy"] > 0.8
    fp16 = run_bench("--model", "mlp", "--precision", "fp16", "--batch-size", "4", "--dataset", "synthetic",
                     "--device", "cpu", python=python)
    assert fp16.rc == 4 and fp16.result["status"] == "unsupported"


def test_resnet18_on_system_python_with_torchvision() -> None:
    """A second, older PyTorch (Debian's 1.13 + torchvision 0.14) builds torchvision's models."""
    if not _probe(SYSTEM_PYTHON, "import torch, torchvision"):
        pytest.skip(f"{SYSTEM_PYTHON} has no torch + torchvision (apt install python3-torchvision)")
    run = run_bench("--model", "resnet18", "--precision", "fp32", "--batch-size", "2", "--dataset", "synthetic",
                    "--image-size", "64", "--iterations", "2", "--warmup", "1", *FAST, python=SYSTEM_PYTHON,
                    timeout=300)
    assert run.rc == 0, run.stderr
    r = run.result
    assert r["status"] == "ok" and r["metrics"]["throughput"] > 0
    assert r["env"]["torchvision"] is not None and r["workload"]["num_classes"] == 1000
    assert r["workload"]["input_shape"] == [3, 64, 64]


def test_imagefolder_on_system_python_with_torchvision(tmp_path: Path) -> None:
    """imagefolder:DIR with DIR/train and DIR/val, read by torchvision's ImageFolder."""
    if not _probe(SYSTEM_PYTHON, "import torch, torchvision, PIL"):
        pytest.skip(f"{SYSTEM_PYTHON} has no torch + torchvision + PIL (apt install python3-torchvision)")
    from PIL import Image

    rng = np.random.RandomState(0)
    for split, count in (("train", 6), ("val", 3)):
        for label in ("cats", "dogs"):
            folder = tmp_path / split / label
            folder.mkdir(parents=True)
            for i in range(count):
                pixels = rng.randint(0, 256, size=(40, 40, 3)).astype(np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    run = run_bench("--model", "mlp", "--precision", "fp32", "--batch-size", "4", "--dataset",
                    f"imagefolder:{tmp_path}", "--image-size", "32", "--iterations", "4", "--warmup", "1",
                    *FAST, python=SYSTEM_PYTHON, timeout=300)
    assert run.rc == 0, run.stderr
    r = run.result
    assert r["workload"]["num_classes"] == 2 and r["workload"]["input_shape"] == [3, 32, 32]
    assert r["workload"]["train_samples"] == 12 and r["workload"]["test_samples"] == 6
    assert r["metrics"]["accuracy"] is not None


# ----------------------------------------------------------------------------- on a GPU (skipped without one)

GPU_REASON = "no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)"


@pytest.mark.gpu
@pytest.mark.parametrize("precision,amp_impl", [
    ("fp32", "auto"), ("tf32", "auto"), ("fp16", "auto"), ("amp", "native"), ("amp", "manual"),
    ("amp-bf16", "auto"), ("bf16", "auto"),
])
def test_gpu_precisions(precision: str, amp_impl: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    run = run_bench("--model", "wrn", "--wrn-depth", "10", "--wrn-width", "2", "--precision", precision,
                    "--amp-impl", amp_impl, "--batch-size", "64", "--dataset", "synthetic", "--iterations", "20",
                    "--warmup", "5", "--channels-last", "--cudnn-benchmark", "--device", "cuda", timeout=300)
    r = run.result
    ampere = torch.cuda.get_device_capability(0) >= (8, 0)
    if precision in ("tf32", "bf16", "amp-bf16") and not ampere:
        assert run.rc == 4 and r["status"] == "unsupported"
        return
    assert run.rc == 0, run.stderr
    m, p = r["metrics"], r["precision"]
    assert m["throughput"] > 0 and math.isfinite(m["loss_end"])
    assert sum(m["iter_times"]) == pytest.approx(m["window_s"], rel=0.05)
    assert m["peak_mem_allocated"] > 0 and m["peak_mem_reserved"] >= m["peak_mem_allocated"]
    assert p["channels_last"] is True and p["cudnn_benchmark"] is True
    expected_tf32 = {"fp32": False, "tf32": True}.get(precision)
    if expected_tf32 is not None:
        assert p["tf32_matmul"] is expected_tf32 and p["tf32_cudnn"] is expected_tf32
    if precision == "amp":
        assert p["mechanism"] == amp_impl
        assert p["loss_scale"] == ("dynamic" if amp_impl == "native" else 256.0)


@pytest.mark.gpu
def test_gpu_out_of_memory_is_status_oom() -> None:
    if not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    run = run_bench("--model", "cifar_vgg16", "--precision", "fp32", "--batch-size", "4000000", "--dataset",
                    "synthetic", "--iterations", "1", "--warmup", "0", "--synthetic-batches", "1",
                    "--image-size", "64", "--device", "cuda", timeout=300)
    assert run.rc == 3, run.stderr
    r = run.result
    assert r["status"] == "oom" and "Traceback" not in run.stderr
