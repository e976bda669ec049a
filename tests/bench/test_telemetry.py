"""GPU telemetry on a CPU: NVML substituted at its import boundary (a fake `pynvml` module), nvidia-smi by a
fake executable on PATH. The real NVML is exercised by the `gpu` tests at the end (skipped without a GPU)."""

from __future__ import annotations

import json
import stat
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.bench import main as bench_main_module
from runner.bench import telemetry

CUDA0 = torch.device("cuda", 0)  # a device object only: nothing runs on it here


class FakeGpu:
    """What the fake NVML answers: an SM clock per reading (the last repeats), power in mW, reason bits,
    and an energy counter in mJ that advances with the clock."""

    def __init__(self, sm: list[int], power_mw: float = 300_000.0, reasons: int = 0, counter: bool = True,
                 fail_after: int | None = None, legacy_reasons: bool = False) -> None:
        self.sm, self.power_mw, self.reasons = sm, power_mw, reasons
        self.counter, self.fail_after, self.legacy_reasons = counter, fail_after, legacy_reasons
        self.reads = 0
        self.t0 = time.perf_counter()
        self.inits = 0
        self.shutdowns = 0

    def module(self) -> types.ModuleType:
        gpu = self
        nv = types.ModuleType("pynvml")
        nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 1, 2, 0

        def init() -> None:
            gpu.inits += 1

        def shutdown() -> None:
            gpu.shutdowns += 1

        def clock(handle: Any, kind: int) -> int:
            if kind == 2:
                return 2619
            gpu.reads += 1
            if gpu.fail_after is not None and gpu.reads > gpu.fail_after:
                raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
            return gpu.sm[min(gpu.reads - 1, len(gpu.sm) - 1)]

        nv.nvmlInit, nv.nvmlShutdown = init, shutdown
        nv.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
        nv.nvmlDeviceGetHandleByUUID = lambda u: ("gpu", u)
        nv.nvmlDeviceGetClockInfo = clock
        nv.nvmlDeviceGetPowerUsage = lambda h: gpu.power_mw
        nv.nvmlDeviceGetTemperature = lambda h, k: 61
        nv.nvmlDeviceGetEnforcedPowerLimit = lambda h: 700_000

        def reasons(handle: Any) -> int:
            return gpu.reasons

        if gpu.legacy_reasons:
            nv.nvmlDeviceGetCurrentClocksThrottleReasons = reasons
        else:
            nv.nvmlDeviceGetCurrentClocksEventReasons = reasons
        if gpu.counter:  # mJ: the fake GPU draws power_mw all the time
            nv.nvmlDeviceGetTotalEnergyConsumption = lambda h: int(
                1_000_000 + (time.perf_counter() - gpu.t0) * gpu.power_mw)
        return nv


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(gpu: FakeGpu) -> FakeGpu:
        monkeypatch.setitem(sys.modules, "pynvml", gpu.module())
        return gpu
    return install


def _window(seconds: float = 0.35, interval: float = 0.05) -> dict[str, Any]:
    stop = telemetry.start(CUDA0, interval=interval)
    time.sleep(seconds)
    return stop()


def test_nvml_samples_clocks_power_temperature_and_energy_from_the_counter(fake_nvml: Any) -> None:
    gpu = fake_nvml(FakeGpu(sm=[1980, 1965, 1980, 1950, 1980]))
    rec = _window()
    assert rec["source"] == "nvml" and rec["error"] is None
    assert rec["samples"] >= 5  # two edges and at least three in between
    assert rec["sm_clock_mhz"]["min"] == 1950 and rec["sm_clock_mhz"]["max"] == 1980
    assert rec["sm_clock_mhz"]["median"] in (1965, 1980)
    assert rec["mem_clock_mhz"] == {"min": 2619, "median": 2619}
    assert rec["power_w"] == {"mean": 300.0, "max": 300.0} and rec["power_limit_w"] == 700.0
    assert rec["temperature_c"] == {"max": 61}
    assert rec["throttled"] is False and rec["clock_events"] == []
    assert rec["energy_source"] == "counter"
    assert rec["energy_j"] == pytest.approx(300.0 * rec["seconds"], rel=0.1)
    assert gpu.inits == gpu.shutdowns == 1  # NVML released after the window


def test_energy_from_sampled_power_where_the_gpu_has_no_counter(fake_nvml: Any) -> None:
    fake_nvml(FakeGpu(sm=[1980], power_mw=250_000.0, counter=False))
    rec = _window()
    assert rec["energy_source"] == "power samples"
    assert rec["energy_j"] == pytest.approx(250.0 * rec["seconds"], rel=0.02)


def test_energy_from_power_integrates_between_samples_and_holds_the_edges() -> None:
    # 100 W from 0 to 1 s, rising to 300 W at 2 s; the window runs 0.5 .. 3.0 s
    samples = [(1.0, 100.0), (2.0, 300.0)]
    expected = 0.5 * 100 + 1.0 * 200 + 1.0 * 300
    assert telemetry.energy_from_power(samples, 0.5, 3.0) == pytest.approx(expected)
    assert telemetry.energy_from_power([(1.0, None)], 0.0, 2.0) is None
    assert telemetry.energy_from_power([(1.0, 100.0)], 2.0, 2.0) is None


def test_a_power_cap_is_throttling_idle_and_application_clocks_are_not(fake_nvml: Any) -> None:
    fake_nvml(FakeGpu(sm=[1980], reasons=0x1 | 0x2))
    rec = _window(0.2)
    assert rec["throttled"] is False and rec["clock_events"] == ["GpuIdle", "ApplicationsClocksSetting"]
    fake_nvml(FakeGpu(sm=[1980], reasons=0x4, legacy_reasons=True))  # only the older NVML name exists
    rec = _window(0.2)
    assert rec["throttled"] is True and "SwPowerCap" in rec["throttle_reason"]
    assert rec["clock_event_mask"] == 0x4 and rec["throttle_samples"] == rec["samples"]


@pytest.mark.parametrize("mask,throttled", [
    (0x0, False), (0x1, False), (0x2, False), (0x10, False), (0x100, False),
    (0x4, True), (0x8, True), (0x20, True), (0x40, True), (0x80, True), (0x1 | 0x40, True),
])
def test_throttle_classification_from_reason_bits(mask: int, throttled: bool) -> None:
    assert telemetry.classify([1980, 1980], mask)[0] is throttled


def test_throttle_classification_from_clocks() -> None:
    assert telemetry.classify([1980, 1900, 1785], 0) == (False, "")  # 90.2% of the maximum: not yet
    flag, why = telemetry.classify([1980, 1700, 1980], 0)
    assert flag is True and "1700 MHz" in why and "1980 MHz" in why
    assert telemetry.classify([], None) == (None, "nothing sampled")
    assert telemetry.classify([], 0) == (False, "")


def test_idle_samples_do_not_count_as_a_clock_drop() -> None:
    samples = [{"t": 0.0, "sm": 1980, "reasons": 0}, {"t": 0.1, "sm": 345, "reasons": 0x1},
               {"t": 0.2, "sm": 1980, "reasons": 0}]
    rec = telemetry.summarize(samples, 0.0, 0.2, "nvml")
    assert rec["throttled"] is False and rec["sm_clock_mhz"]["min"] == 1980
    assert rec["clock_events"] == ["GpuIdle"]


def test_unknown_reason_bits_are_kept_as_hex() -> None:
    assert telemetry.reason_names(0x4 | 0x10000) == ["SwPowerCap", "0x10000"]


def test_samples_are_bounded(fake_nvml: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_nvml(FakeGpu(sm=[1980]))
    monkeypatch.setattr(telemetry, "MAX_SAMPLES", 6)
    monkeypatch.setattr(telemetry, "MIN_INTERVAL_S", 0.01)
    rec = _window(0.5, interval=0.01)
    assert rec["samples"] <= 6 + 1  # the closing edge comes after the last halving
    assert rec["interval_s"] > 0.01  # the rate was halved


def test_the_rate_is_bounded() -> None:
    sampler = telemetry.Sampler(None, "nvml", interval=0.0001)
    assert sampler.interval == telemetry.MIN_INTERVAL_S


def test_an_nvml_that_breaks_mid_window_is_an_error_in_the_record_not_a_crash(fake_nvml: Any) -> None:
    fake_nvml(FakeGpu(sm=[1980], fail_after=2))
    rec = _window(0.3)
    assert rec["source"] == "nvml"
    assert rec["sm_clock_mhz"]["max"] == 1980  # readings that failed are missing, the rest kept


def test_no_nvml_and_no_nvidia_smi_says_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    monkeypatch.setenv("PATH", str(tmp_path))
    rec = _window(0.05)
    assert rec["source"] is None and rec["samples"] == 0 and rec["throttled"] is None
    assert "pynvml is not importable" in rec["why"] and "nvidia-smi is not on PATH" in rec["why"]
    assert rec["energy_j"] is None


FAKE_SMI = """#!{python}
import sys, time
args = " ".join(sys.argv[1:])
if "power.limit" in args and "-lms" not in args:
    print("700.00"); sys.exit(0)
if "clocks_event_reasons.active" in args:  # an older driver: only the older field name
    print('Field "clocks_event_reasons.active" is not a valid field to query.'); sys.exit(2)
if "-i 0" not in args:
    print("No devices were found"); sys.exit(6)
clocks = [1980, 1980, 1410, 1980]
for i in range(10000):
    print("%d, 2619, 412.5, 70, 0x0000000000000000" % clocks[i % len(clocks)], flush=True)
    time.sleep(0.02)
"""


def test_nvidia_smi_fallback_with_the_older_reason_field(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text(FAKE_SMI.format(python=sys.executable))
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rec = _window(1.0)
    assert rec["source"] == "nvidia-smi" and rec["error"] is None, rec
    assert rec["samples"] >= 4
    assert rec["sm_clock_mhz"]["min"] == 1410 and rec["throttled"] is True  # 71% of 1980
    assert rec["power_w"]["mean"] == pytest.approx(412.5) and rec["power_limit_w"] == 700.0
    assert rec["energy_source"] == "power samples"
    assert rec["energy_j"] == pytest.approx(412.5 * rec["seconds"], rel=0.02)


def test_parse_smi_line() -> None:
    s = telemetry.parse_smi_line("1755, 2619, [N/A], 66, 0x0000000000000004\n")
    assert s is not None and (s["sm"], s["power"], s["reasons"]) == (1755.0, None, 4)
    assert telemetry.parse_smi_line("No devices were found") is None


def test_ranks_of_one_process_give_images_per_joule() -> None:
    rec = telemetry.summarize([], 0.0, 1.0, "nvml", counter_j=500.0)
    out = telemetry.combine_ranks(rec, 1000, 1, None, None)
    assert out["energy_j"] == 500.0 and out["images_per_joule"] == 2.0
    none = telemetry.combine_ranks(telemetry.nothing("cpu"), 1000, 1, None, None)
    assert none["energy_j"] is None and none["images_per_joule"] is None


def test_ranks_sum_their_energy_and_any_throttled_rank_marks_the_repeat(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.bench import distributed
    others = [[700.0, 1.0, 1.0, 1.0]]  # a second rank: 700 J, throttled

    def all_reduce(dist: Any, values: list[float], op: str, device: Any) -> list[float]:
        assert op == "SUM"
        return [a + b for a, b in zip(values, others[0], strict=True)]

    monkeypatch.setattr(distributed, "all_reduce_values", all_reduce)
    rec = telemetry.summarize([], 0.0, 1.0, "nvml", counter_j=500.0)
    out = telemetry.combine_ranks(rec, 2400, 2, object(), None)
    assert out["energy_j"] == 1200.0 and out["images_per_joule"] == 2.0
    assert out["telemetry"]["throttled"] is True and out["telemetry"]["ranks"]["ranks_throttled"] == 1
    others[0] = [0.0, 0.0, 0.0, 1.0]  # the second rank had no energy reading
    out = telemetry.combine_ranks(rec, 2400, 2, object(), None)
    assert out["energy_j"] is None and out["images_per_joule"] is None


def test_a_cpu_result_says_no_gpu_was_sampled(capfd: pytest.CaptureFixture[str]) -> None:
    code = bench_main_module.main(["--model", "mlp", "--precision", "fp32", "--batch-size", "8", "--dataset",
                                   "synthetic", "--iterations", "3", "--warmup", "1", "--threads", "1"])
    out = capfd.readouterr().out
    assert code == 0
    r = json.loads(out.splitlines()[-1][len("MATRIX_RESULT "):])
    m = r["metrics"]
    assert m["telemetry"]["source"] is None and "cpu device" in m["telemetry"]["why"]
    assert m["energy_j"] is None and m["images_per_joule"] is None
    assert "device_features" not in r["env"] and "native" not in r["precision"]


# ----------------------------------------------------------------------------- the real thing

GPU_REASON = "no CUDA device here (CI machines have none; run on a GPU host with `pytest -m gpu`)"


@pytest.mark.gpu
def test_gpu_window_is_sampled_with_the_real_nvml_or_nvidia_smi() -> None:
    if not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    from runner.bench import preflight
    device = torch.device("cuda", 0)
    feats = preflight.device_features(device)
    assert feats is not None and feats["runs"] is True and preflight.mismatch(feats) is None
    a = torch.randn(4096, 4096, device=device)
    stop = telemetry.start(device)
    end = time.perf_counter() + 1.5
    while time.perf_counter() < end:
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    rec = stop()
    assert rec["source"] in ("nvml", "nvidia-smi"), rec
    assert rec["samples"] >= 3 and rec["sm_clock_mhz"]["max"] > 100
    assert rec["power_w"]["mean"] > 0 and rec["energy_j"] > 0
    assert rec["throttled"] in (True, False)


@pytest.mark.gpu
def test_gpu_bench_result_records_telemetry_energy_and_what_the_precision_ran_on() -> None:
    if not torch.cuda.is_available():
        pytest.skip(GPU_REASON)
    import subprocess

    from runner.backends import artifact
    proc = subprocess.run([sys.executable, str(artifact.path()), "--model", "mnist_cnn", "--precision", "amp",
                           "--batch-size", "256", "--dataset", "synthetic", "--iterations", "200", "--warmup", "20",
                           "--device", "cuda"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = json.loads(proc.stdout.splitlines()[-1][len("MATRIX_RESULT "):])
    m, env = r["metrics"], r["env"]
    assert m["telemetry"]["source"] in ("nvml", "nvidia-smi") and m["telemetry"]["samples"] >= 2
    assert m["energy_j"] > 0 and m["images_per_joule"] == pytest.approx(m["images"] / m["energy_j"])
    assert env["device_features"]["runs"] is True and env["device_features"]["sm"].startswith("sm_")
    volta = torch.cuda.get_device_capability(0) >= (7, 0)
    assert r["precision"]["native"] == {"device": "cuda", "unit": "fp16 tensor cores" if volta else
                                        r["precision"]["native"]["unit"], "native": volta}
