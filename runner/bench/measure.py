"""For a training script of your own: measure its window as bench measures its own, and report it.

Run as a workload with `parser: matrix`, the script finds this module in the benchmark's zipapp (the
launcher puts the zipapp on PYTHONPATH):

    from matrix_bench import measure

    for _ in range(warmup):                  # discarded: compilation, autotuning, clocks ramping up
        train_step()
    window = measure.start(device)           # the device synchronised, ranks lined up, peak memory reset,
    for _ in range(iterations):              # GPU telemetry sampling
        loss = train_step()
    measure.stop(window)                     # once the device has finished its queued work
    measure.report(window, items=iterations * batch_size, iterations=iterations, loss=float(loss),
                   losses=kept_losses,       # every loss the script kept (each step's, or every Nth), in order
                   accuracy=evaluate())      # outside the window

`report` prints the one result line (rank 0) with the window's seconds, throughput (items over the window, all ranks), peak memory, telemetry
and the environment capture. A loss that was NaN or infinite (`loss` or any of `losses`) makes the repeat `diverged`,
and admission checks that none grew by orders of magnitude (docs/admission.md). Python 3.6 syntax, standard library
and torch only, like bench.
"""

import os
import sys

from . import envinfo, telemetry, timing
from .compat import torch
from .contract import SCHEMA
from .readings import LossSeen, loss_words
from .result import empty_metrics, result_line


def _device(device):
    if device is None:
        return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(device) if not isinstance(device, torch.device) else device
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _dist():
    """torch.distributed when the script initialised a process group, else None."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def start(device=None):
    """Open the measured window; call it after the warm-up. Returns the window for report()."""
    device = _device(device)
    dist = _dist()
    window = timing.start_window(device, dist)
    window["device"] = device
    window["dist"] = dist
    return window


def stop(window):
    """Close the window once the device has finished its queued work (before an evaluation that is not
    part of it); report() closes it when this was not called."""
    if "seconds" not in window:
        window["seconds"], window["telemetry"] = timing.end_window(window["device"], window)
    return window["seconds"]


def loss_record(losses, loss):
    """metrics.loss_seen of what the script reported: each of `losses`, then `loss` (the final one) unless it is the
    last of them already."""
    values = list(losses or ())
    if loss is not None and not (values and bool(values[-1] == loss)):
        values.append(loss)
    kept = LossSeen("measure: the losses the script reported")
    for value in values:
        kept.add(value)
    return kept.record()


def report(window, items, iterations=None, loss=None, accuracy=None, status="ok", reason=None, unit="items",
           losses=None, **extra):
    """Print the result line (rank 0) of a window stop() closed (or close it now). `items`: samples this
    process trained in the window (summed over the ranks here), counted in `unit` (images, samples, tokens:
    the throughput is shown in unit/s). `loss`: the final loss; `losses`: the losses the script kept over its
    training, in order (each is checked: a NaN or an infinity among them makes the repeat `diverged`). Returns
    the result."""
    device, dist = window["device"], window["dist"]
    stop(window)
    window_s, seen = window["seconds"], window["telemetry"]
    world = dist.get_world_size() if dist is not None else 1
    rank = dist.get_rank() if dist is not None else int(os.environ.get("RANK", "0") or 0)
    total = float(items)
    if dist is not None:
        from .distributed import all_reduce_values
        total, = all_reduce_values(dist, [total], "SUM", device)
        window_s, = all_reduce_values(dist, [window_s], "MAX", device)
    metrics = empty_metrics(world)
    metrics.update(timing.memory_metrics(device))
    metrics.update({"throughput": total / window_s if window_s > 0 and total > 0 else None,
                    "window_s": window_s, "images": int(total), "loss_end": loss, "accuracy": accuracy})
    metrics["definitions"] = {"throughput": {"how": "measure: items over the script's synchronised window",
                                             "unit": "%s/s" % unit}}
    metrics["loss_seen"] = loss_record(losses, loss)
    diverged = loss_words(metrics["loss_seen"])
    if diverged and status == "ok":  # as bench says of its own training
        status, reason = "diverged", diverged
    if iterations:
        metrics["iter_times"] = [window_s / iterations]  # their mean: one value, not a made-up series
    if seen is not None:
        metrics.update(telemetry.combine_ranks(seen, total, world, dist, device))
    result = {"schema": SCHEMA, "status": status, "reason": reason, "params": {}, "metrics": metrics,
              "precision": None, "env": envinfo.capture_env(device), "workload": dict(extra, measured_by="measure")}
    if rank == 0:
        sys.stdout.flush()
        sys.stdout.write(result_line(result) + "\n")
        sys.stdout.flush()
    return result


def unsupported(reason):
    """Say that this environment cannot run what the cell asks (a status, not a failure), and exit 4."""
    from .contract import EXIT_UNSUPPORTED
    if int(os.environ.get("RANK", "0") or 0) == 0:
        result = {"schema": SCHEMA, "status": "unsupported", "reason": str(reason), "params": {},
                  "metrics": empty_metrics(1), "precision": None, "env": envinfo.capture_env(None), "workload": None}
        sys.stdout.write(result_line(result) + "\n")
        sys.stdout.flush()
    sys.exit(EXIT_UNSUPPORTED)
