"""The measured window: warm-up iterations, then timed ones between two device synchronisations.

`start_window` and `end_window` are everything the window's edges do (synchronise, line the ranks
up, reset peak memory, telemetry); `run_window` is bench's own loop between them. `warmup_done` is the
one rule that ends the warm-up.
"""

import time

from . import telemetry
from .compat import torch
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


def warmup_done(done, requested, times):
    """True when the warm-up may end: after `requested` iterations. `times` holds the host-side
    duration of each warm-up iteration so far: the seam for a rule that warms up until they are steady."""
    return done >= requested


def run_warmup(n, source, steps):
    """Discarded iterations; returns the first loss (a sync, outside the window) or None."""
    forward, backward, update = steps
    first = None
    times = []
    perf = time.perf_counter
    while not warmup_done(len(times), n, times):
        a = perf()
        x, y = source.next()
        loss = forward(x, y)
        backward(loss)
        update()
        if not times:
            first = float(loss.detach().float().item())
        times.append(perf() - a)
    return first


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


def run_window(n, source, steps, device, breakdown, dist=None):
    """The measured iterations. The device is synchronised before and after (and, with
    breakdown, around each phase); per-iteration times come from CUDA events read at the end
    on a GPU, perf_counter on CPU, so the loop itself never waits for the device."""
    forward, backward, update = steps
    sync = _sync_fn(device)
    cuda = device.type == "cuda"
    events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)] if cuda else None
    host_times = []
    losses = []
    phases = [0.0, 0.0, 0.0]
    data_wait = 0.0
    perf = time.perf_counter
    window = start_window(device, dist)
    if cuda:
        events[0].record()
    prev = window["t0"]
    for i in range(n):
        a = perf()
        x, y = source.next()
        b = perf()
        data_wait += b - a
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
        losses.append(loss.detach())
        if cuda:
            events[i + 1].record()
        else:
            now = perf()
            host_times.append(now - prev)
            prev = now
    window_s, seen = end_window(device, window)
    if cuda:
        iter_times = [events[i].elapsed_time(events[i + 1]) / 1000.0 for i in range(n)]
    else:
        iter_times = host_times
    loss_values = torch.stack(losses).float().cpu().tolist() if losses else []
    out = {"window_s": window_s, "iter_times": iter_times, "data_wait_s": data_wait,
           "losses": loss_values}
    if breakdown:
        out["breakdown"] = {"forward_s": phases[0], "backward_s": phases[1], "optimizer_s": phases[2],
                            "synchronized_per_phase": True}
    if seen is not None:
        out["telemetry"] = seen
    return out
