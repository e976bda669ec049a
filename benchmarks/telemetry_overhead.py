"""What the GPU telemetry sampler costs the measurement: bench's training loop on this CPU with the sampler off
and on, alternating window by window, the NVML it reads substituted by a fake whose every call is a real
foreign call that releases the GIL and waits about as long as a real NVML query (ctypes' usleep), so the
thread does what it does on a GPU machine: wake up, take the GIL, call out, sleep.

Prints each setting's median throughput with the sampler off and on, the median of the paired on/off
ratios (one pair per round, the order alternating) with a bootstrap 95% interval, how many samples a window
took, and the CPU time the sampling thread itself used (its own clock, per sample and as a share of a core):
the direct figure where the throughput's noise hides a small cost. The sampler's default rate (bench's SAMPLE_INTERVAL_S) is
measured, then the fastest it allows (MIN_INTERVAL_S), then 1 ms, past that bound, to show what the bound
keeps out.

    .venv/bin/python benchmarks/telemetry_overhead.py [--model mlp] [--batch-size 64] [--rounds 15]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from runner.bench import data, models, precision, telemetry, training  # noqa: E402
from runner.bench.args import parse_args  # noqa: E402

LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def fake_nvml(call_us: int) -> types.ModuleType:
    """pynvml whose every query is one foreign call of about `call_us` microseconds (the GIL released)."""
    nv = types.ModuleType("pynvml")
    calls = [0]

    def query(*args: object) -> int:
        calls[0] += 1
        LIBC.usleep(call_us)
        return 1980

    nv.calls = calls  # type: ignore[attr-defined]
    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByIndex = nv.nvmlDeviceGetHandleByUUID = lambda key: key
    for name in ("nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetTotalEnergyConsumption"):
        setattr(nv, name, query)
    nv.nvmlDeviceGetPowerUsage = lambda h: query() * 100
    return nv


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--window", type=float, default=1.0, help="seconds per measured window")
    p.add_argument("--rounds", type=int, default=15, help="off/on window pairs per setting")
    p.add_argument("--call-us", type=int, default=30, help="microseconds per fake NVML query")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bargs = parse_args(["--model", args.model, "--precision", "fp32", "--batch-size", str(args.batch_size),
                        "--dataset", "synthetic", "--device", "cpu"])
    device = torch.device("cpu")
    plan = precision.plan_precision(bargs, device)
    source, _, channels, hw, classes, _ = data.load_data(bargs, device, plan, models.model_defaults(args.model),
                                                        (0, 1, 0))
    model = models.build_model(args.model, bargs, channels, hw, classes)
    model, _, (forward, backward, update), _, _ = training.setup_training(model, plan, bargs, device, (0, 1, 0))
    nv = fake_nvml(args.call_us)
    sys.modules["pynvml"] = nv
    gpu = torch.device("cuda", 0)  # only its name: telemetry samples "GPU 0" through the fake NVML

    def window(sampled: bool, interval: float) -> tuple[float, int]:
        stop = telemetry.start(gpu, interval=interval) if sampled else None
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < args.window:
            x, y = source.next()
            backward(forward(x, y))
            update()
            n += 1
        elapsed = time.perf_counter() - t0
        samples = stop()["samples"] if stop is not None else 0
        return n * args.batch_size / elapsed, samples

    cpu: list[float] = []
    run_thread = telemetry.Sampler._run

    def timed_run(self: telemetry.Sampler) -> None:  # the sampling thread's own CPU time
        start = time.thread_time()
        try:
            run_thread(self)
        finally:
            cpu.append(time.thread_time() - start)

    telemetry.Sampler._run = timed_run  # type: ignore[method-assign]
    for _ in range(3):  # warm-up
        window(False, telemetry.SAMPLE_INTERVAL_S)
    print(f"{args.model} batch {args.batch_size}, {args.threads} thread(s), {args.window:g} s windows, "
          f"{args.rounds} off/on pairs per setting, fake NVML query {args.call_us} us; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    bound = telemetry.MIN_INTERVAL_S
    for label, interval, floor in (("default rate", telemetry.SAMPLE_INTERVAL_S, bound),
                                   ("fastest rate allowed", bound, bound),
                                   ("1 ms, past the bound", 0.001, 0.001)):
        telemetry.MIN_INTERVAL_S = floor
        off, on, samples, pairs = [], [], [], []
        cpu.clear()
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {}
            for sampled in order:
                tput, n = window(sampled, interval)
                got[sampled] = tput
                (on if sampled else off).append(tput)
                if sampled:
                    samples.append(n)
            pairs.append(got[True] / got[False])
        ratio = statistics.median(pairs)
        rng = random.Random(0)
        boot = sorted(statistics.median(rng.choices(pairs, k=len(pairs))) for _ in range(2000))
        per_sample = sum(cpu) / max(sum(samples), 1)
        share = sum(cpu) / (args.rounds * args.window)
        print(f"{label} (every {interval * 1000:.0f} ms, {statistics.median(samples):.0f} samples a window): "
              f"off {statistics.median(off):.1f} img/s, on {statistics.median(on):.1f} img/s, paired on/off "
              f"{ratio:.4f} (95% bootstrap interval {boot[50]:.4f}-{boot[1949]:.4f}), CV off "
              f"{statistics.stdev(off) / statistics.mean(off):.2%}; the sampling thread used "
              f"{per_sample * 1e6:.0f} us of CPU per sample, {share:.3%} of a core")
    telemetry.MIN_INTERVAL_S = bound
    telemetry.Sampler._run = run_thread  # type: ignore[method-assign]
    print(f"load average after {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
