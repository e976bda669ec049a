"""The measured window: warm-up iterations, then timed ones between two device synchronisations.

`start_window` and `end_window` are everything the window's edges do (synchronise, line the ranks
up, reset peak memory, telemetry); `run_window` is bench's own loop between them. `warmup_done` is the
one rule that ends the warm-up.
"""

import math
import time

from . import telemetry
from .compat import torch
from .contract import WINDOW_REDO_BELOW
from .envinfo import device_memory_used, host_peak_rss


def _sync_fn(device):
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def reset_peak_memory(device):
    if device.type != "cuda":
        return
    if hasattr(torch.cuda, "reset_peak_memory_stats"):
        torch.cuda.reset_peak_memory_stats(device)
    elif hasattr(torch.cuda, "reset_max_memory_allocated"):
        torch.cuda.reset_max_memory_allocated(device)


def memory_metrics(device):
    """Peak allocator memory since the last reset, and the driver's view of the device."""
    out = {"peak_mem_allocated": None, "peak_mem_reserved": None, "device_mem_used": None,
           "host_peak_rss": host_peak_rss()}
    if device is None or device.type != "cuda":
        return out
    try:
        out["peak_mem_allocated"] = int(torch.cuda.max_memory_allocated(device))
        reserved = getattr(torch.cuda, "max_memory_reserved", None) or getattr(torch.cuda, "max_memory_cached")
        out["peak_mem_reserved"] = int(reserved(device))
    except Exception:
        pass
    out["device_mem_used"] = device_memory_used(device.index if device.index is not None else 0)
    return out


# Warm-up until steady (docs/statistics.md, "Warm-up and measured windows"). The rule looks for a trend, not
# for quiet: noise is what the CV across repeats reports.
STEADY_WINDOW = 5       # iterations in each of the two windows compared
STEADY_TOLERANCE = 0.05  # the largest change between their medians that counts as no trend
NOISE_Z = 2.5           # ... unless noise alone makes a larger change likely (2.5 standard errors: trend-free
                        # noise trips the rule in 3-6% of checks, benchmarks/warmup_rule.py)
LOSS_STEPS_BASE = (1, 2, 5)  # losses are kept at steps 1, 2, 5, 10, 20, 50, 100, ... of every repeat


def median(values):
    xs = sorted(values)
    n = len(xs)
    if not n:
        return None
    mid = n // 2
    return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def steady(times, window=STEADY_WINDOW, tolerance=STEADY_TOLERANCE):
    """Whether the last 2 x `window` iteration times show no trend: the medians of the last window and the one
    before differ by at most `tolerance` of the last, or by no more than noise alone would make them differ
    (NOISE_Z standard errors of a difference of two medians, the spread estimated from the windows' own median
    absolute deviation). None while there are fewer than 2 x `window` times."""
    if window < 1 or len(times) < 2 * window:
        return None
    before, last = times[-2 * window:-window], times[-window:]
    m0, m1 = median(before), median(last)
    if not m1 or m1 <= 0:
        return False
    # The spread: the median absolute deviation of both windows from their own medians, without the smallest
    # deviation of each (a window's median is one of its values, or next to them: a zero that makes the
    # deviation of so few values too small), scaled to a standard deviation.
    deviations = sorted([abs(x - m0) for x in before] + [abs(x - m1) for x in last])[2:]
    spread = 1.4826 * median(deviations)
    # The standard error of a median of w values is about 1.2533 sigma / sqrt(w); of a difference of two, x sqrt(2).
    noise = NOISE_Z * 1.2533 * spread * (2.0 / window) ** 0.5
    return abs(m1 - m0) <= max(tolerance * m1, noise)


def warmup_done(done, requested, times, rule=None, elapsed=0.0):
    """Whether the warm-up may end: (done, how). Fixed (rule None): after `requested` iterations, how "fixed".
    Until steady (rule: {"max", "max_time", "window", "tolerance"}): not before `requested` iterations nor before
    two windows of times exist; then when `steady(times)`, how "steady"; at the latest after rule["max"]
    iterations or rule["max_time"] seconds, how "max" or "max_time" (never steady)."""
    if rule is None:
        return (done >= requested, "fixed")
    floor = max(requested, 2 * rule["window"])
    if done >= floor and steady(times, rule["window"], rule["tolerance"]):
        return (True, "steady")
    if done >= rule["max"]:
        return (True, "max")
    if rule.get("max_time") is not None and elapsed >= rule["max_time"] and done >= 1:
        return (True, "max_time")
    return (False, None)


def replay_warmup(trace, requested, rule=None):
    """(iterations, how): where warmup_done ends a warm-up whose iteration times (seconds) are `trace`, the
    elapsed time being their sum; how is None when the trace ends first. For tests and benchmarks/."""
    times = []
    elapsed = 0.0
    while True:
        stop, how = warmup_done(len(times), requested, times, rule, elapsed)
        if stop:
            return len(times), how
        if len(times) >= len(trace):
            return len(times), None
        times.append(trace[len(times)])
        elapsed += times[-1]


def loss_step(step):
    """Whether the loss of training step `step` (1-based, warm-up included) is kept: 1, 2, 5, 10, 20, 50, ..."""
    scale = 1
    while scale <= step:
        if step in [b * scale for b in LOSS_STEPS_BASE]:
            return True
        scale *= 10
    return False


class LossKeeper(object):
    """Every loss of a phase, read once at its end: floats on a CPU (no device to wait for), tensors on a GPU (the loop
    never waits for them), stacked into one tensor every CHUNK steps so a long phase holds a few tensors, not
    thousands of scalars (each one an allocator block, and hundreds scatter the C heap: run_window's note)."""

    CHUNK = 256

    def __init__(self, on_gpu):
        self.on_gpu = on_gpu
        self.floats = []
        self.pending = []
        self.chunks = []

    def add(self, loss):
        if not self.on_gpu:
            self.floats.append(float(loss.detach().item()))
            return
        self.pending.append(loss.detach().float())
        if len(self.pending) >= self.CHUNK:
            self.chunks.append(torch.stack(self.pending))
            self.pending = []

    def values(self):
        """The losses as floats, in order: on a GPU one copy to the host (the phase's one wait)."""
        if not self.on_gpu:
            return list(self.floats)
        parts = self.chunks + ([torch.stack(self.pending)] if self.pending else [])
        if not parts:
            return []
        return [float(v) for v in torch.cat(parts).cpu().tolist()]


def run_warmup(n, source, steps, device=None, rule=None, timed=False, agree=None):
    """Discarded iterations: `n` of them, or until steady under `rule` (see warmup_done). With a rule, or
    `timed` (a window to calibrate from these times), each iteration ends with a device synchronisation, so its
    time is the device's, not the host's queueing time (outside the measured window, it costs nothing that is
    measured). `agree(stop) -> stop`: ranks of a distributed run stop together (every step is a collective).
    Returns {"first_loss", "times", "done", "how", "elapsed_s", "losses": [every step's loss]}; the losses are
    read from the device once, at the end (LossKeeper)."""
    forward, backward, update = steps
    times = []
    kept = LossKeeper(device is not None and device.type == "cuda")
    sync = _sync_fn(device) if device is not None and (rule is not None or timed) else None
    perf = time.perf_counter
    start = perf()
    how = "fixed"
    while True:
        stop, how = warmup_done(len(times), n, times, rule, perf() - start)
        if rule is not None and agree is not None:
            stop = agree(stop)  # every rank's vote: stop only when all of them would
        if stop:
            break
        a = perf()
        x, y = source.next()
        loss = forward(x, y)
        backward(loss)
        update()
        if sync is not None:
            sync()
        times.append(perf() - a)
        kept.add(loss)
    losses = kept.values()
    return {"first_loss": losses[0] if losses else None, "times": times, "done": len(times), "how": how,
            "elapsed_s": perf() - start, "losses": losses}


# Calibration counts steady iterations only: an iteration slower than SLOW_FACTOR x the warm-up's fastest is start-up
# (CUDA context, cuDNN autotuning, compilation: 10 to 1000 times a steady one), not a steady iteration; a loaded
# CPU's noise stays under 3x (tests/bench/test_timing.py's CPU trace: 2.7x between its extremes).
SLOW_FACTOR = 4.0
# A calibrated window asks for CALIBRATE_MARGIN more than --window-time: the window runs without the warm-up's
# per-iteration synchronisation and a few percent faster than its estimate now and then, and a window short by 1%
# would be measured a second time (resize). A re-sized window asks for RESIZE_MARGIN more.
CALIBRATE_MARGIN = 0.05
RESIZE_MARGIN = 0.10
MAX_RESIZES = 4       # re-sized windows at most, after the first
# A window shorter than REDO_BELOW x --window-time was sized from a wrong estimate (a warm-up that was not steady):
# it is measured again, re-sized (resize). One between that and the time asked fell short by the run's own noise:
# it is completed where it stands (run_window's `extend`), never measured again, since measuring again only the
# windows that came out short (the fast ones) keeps the slow ones (a window-to-window CV of 5% biased the kept mean
# by -1.4% that way, 8% by -3%).
REDO_BELOW = WINDOW_REDO_BELOW
MAX_EXTENDS = 3


def extension(elapsed_s, done, min_time, most, margin=CALIBRATE_MARGIN):
    """The iterations a window of `done` iterations that took `elapsed_s` needs to reach `min_time` (`margin`
    more), at the pace it kept, up to `most` in all: 0 when it is long enough, at `most`, or short enough to be
    sized anew (below REDO_BELOW of the time: resize's case)."""
    if done < 1 or elapsed_s <= 0 or elapsed_s >= min_time or done >= most or elapsed_s < REDO_BELOW * min_time:
        return 0
    per_iter = elapsed_s / done
    need = int(math.ceil((min_time * (1.0 + margin) - elapsed_s) / per_iter))
    return max(1, min(most - done, need))


def steady_times(times):
    """The warm-up's iteration times that count as steady: never the first (it pays every first-call cost), nor
    one slower than SLOW_FACTOR x the fastest of the others. [] with fewer than two iterations."""
    rest = [t for t in times[1:] if t > 0]
    if not rest:
        return []
    fastest = min(rest)
    return [t for t in rest if t <= SLOW_FACTOR * fastest]


def calibrate(warmup_times, min_time, least, most, window=STEADY_WINDOW, margin=CALIBRATE_MARGIN):
    """The measured iterations for a window of at least `min_time` seconds (`margin` more asked), from the warm-up's
    steady iteration times (steady_times): their median over the last half (at most one steady window), the count
    at least `least` and at most `most` (the ceiling wins). Returns (iterations, seconds per iteration), or
    (least, None) without a steady time: the window is then re-sized from its own times (resize)."""
    steady_ones = steady_times(warmup_times)
    if not steady_ones:
        return min(most, least), None
    tail = steady_ones[-max(1, min(window, len(steady_ones) // 2)):]
    per_iter = median(tail)
    need = int(math.ceil(min_time * (1.0 + margin) / per_iter))
    return min(most, max(least, need)), per_iter


def resize(window_s, iter_times, iterations, min_time, most, margin=RESIZE_MARGIN):
    """(iterations, seconds per iteration) for a new window when this one came out shorter than REDO_BELOW x
    `min_time` (sized from a wrong estimate; a window a little short is completed instead: extension), from
    its own times: the smaller of its mean and its median iteration (a slow first iteration does not shrink the
    next window), `margin` more time asked; at least one more iteration, at most `most`. None when the window
    is long enough, at `most` already, or empty."""
    if iterations < 1 or window_s >= REDO_BELOW * min_time or iterations >= most or window_s <= 0:
        return None
    per_iter = window_s / iterations
    mid = median([t for t in iter_times if t > 0])
    if mid:
        per_iter = min(per_iter, mid)
    need = int(math.ceil(min_time * (1.0 + margin) / per_iter))
    return min(most, max(iterations + 1, need)), per_iter


def start_window(device, dist=None):
    """Open the window: the device idle, every rank at the barrier, peak memory reset, telemetry
    started. Returns the window's state for end_window; its "t0" is the start on perf_counter."""
    sync = _sync_fn(device)
    sync()
    if dist is not None:
        dist.barrier()  # every rank starts its window together
    reset_peak_memory(device)
    stop_telemetry = telemetry.start(device)
    sync()
    return {"t0": time.perf_counter(), "stop_telemetry": stop_telemetry}


def end_window(device, window):
    """Close the window once the device has finished its queued work: (wall seconds, telemetry or None)."""
    _sync_fn(device)()
    t1 = time.perf_counter()
    return t1 - window["t0"], window["stop_telemetry"]()


def run_window(n, source, steps, device, breakdown, dist=None, extend=None):
    """The measured iterations. The device is synchronised before and after (and, with
    breakdown, around each phase); per-iteration times come from CUDA events read at the end
    on a GPU, perf_counter on CPU, so the loop itself never waits for the device.

    `extend(elapsed_s, iterations_done) -> more`: asked once the `n` iterations are done, with the device
    synchronised: the window goes on for `more` iterations (0: it ends), inside the same timing and telemetry, so a
    window that came out a little short of its promise is completed rather than measured again (measuring again
    only the windows that came out short, the fast ones, would keep the slow ones: measured.py)."""
    forward, backward, update = steps
    sync = _sync_fn(device)
    cuda = device.type == "cuda"
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if cuda else None
    host_times = []
    losses = LossKeeper(cuda)
    phases = [0.0, 0.0, 0.0]
    state = {"data_wait": 0.0, "prev": 0.0}
    perf = time.perf_counter
    window = start_window(device, dist)
    if cuda:
        events[0].record()
    state["prev"] = window["t0"]
    done, todo = 0, n
    while todo > 0:
        for _ in range(todo):
            _step(source, (forward, backward, update), sync, breakdown, phases, state, losses)
            done += 1
            if cuda:
                events[done].record()
            else:
                now = perf()
                host_times.append(now - state["prev"])
                state["prev"] = now
        todo = 0
        if extend is not None:
            sync()
            todo = int(extend(perf() - window["t0"], done))
            if todo > 0 and cuda:
                events.extend(torch.cuda.Event(enable_timing=True) for _ in range(todo))
    window_s, seen = end_window(device, window)
    if cuda:
        iter_times = [events[i].elapsed_time(events[i + 1]) / 1000.0 for i in range(done)]
    else:
        iter_times = host_times
    out = {"window_s": window_s, "iter_times": iter_times, "data_wait_s": state["data_wait"],
           "losses": losses.values(), "iterations": done}
    if breakdown:
        out["breakdown"] = {"forward_s": phases[0], "backward_s": phases[1], "optimizer_s": phases[2],
                            "synchronized_per_phase": True}
    if seen is not None:
        out["telemetry"] = seen
    return out


def _step(source, steps, sync, breakdown, phases, state, losses):
    """One measured iteration (run_window's loop body)."""
    forward, backward, update = steps
    perf = time.perf_counter
    a = perf()
    x, y = source.next()
    b = perf()
    state["data_wait"] += b - a
    if breakdown:
        sync()
        b = perf()
        loss = forward(x, y)
        sync()
        c = perf()
        backward(loss)
        sync()
        d = perf()
        update()
        sync()
        e = perf()
        phases[0] += c - b
        phases[1] += d - c
        phases[2] += e - d
    else:
        loss = forward(x, y)
        backward(loss)
        update()
    # The loss as a float on a CPU (no device to wait for): hundreds of kept scalar tensors scatter small
    # blocks through the C heap, so the step's large blocks cannot be reused and are faulted in again
    # (benchmarks/transformer_vs_reference.py: about 1.6x the page faults and 3-5% fewer tok/s for a small
    # transformer than the same loop keeping floats). On a GPU a tensor, so the loop never waits for it.
    losses.add(loss)
