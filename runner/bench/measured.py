"""The measured window as asked: the warm-up, the window's count calibrated from the warm-up's steady iterations,
and windows re-sized from their own times until one is as long as --window-time asks (or the count reaches
--window-max); every loss checked finite on the way (health.FiniteCheck), the loss scaler's skipped steps counted.

A warm-up whose loss became NaN or infinite ends the repeat before any window (it is diverged: a window would
measure a broken training, and a GPU lease is short); a window that diverges is finished, its figures kept for
the record. A window re-sized away counts as training steps before the window finally measured.
"""

import math
import os
import time

from . import distributed, timing
from .compat import log
from .errors import BadArgs

SLOW_START_VAR = "MATRIX_BENCH_SLOW_START"


def slow_start(steps, metrics, environ=None):
    """A test seam: MATRIX_BENCH_SLOW_START="N:SECONDS" makes the first N training steps sleep SECONDS each, a slow
    start (CUDA's, cuDNN autotuning's, compilation's) that a CPU run can show. Said on stderr and recorded
    (metrics.slow_start): a repeat run with it measured a start made slow on purpose."""
    spec = (os.environ if environ is None else environ).get(SLOW_START_VAR)
    if not spec:
        return steps
    try:
        count, seconds = spec.split(":")
        count, seconds = int(count), float(seconds)
    except ValueError:
        count, seconds = -1, -1.0
    if count < 0 or not (math.isfinite(seconds) and seconds >= 0):
        raise BadArgs("%s=%r: expected N:SECONDS (steps, seconds each), e.g. 3:0.5" % (SLOW_START_VAR, spec))
    forward, backward, update = steps
    done = [0]

    def slow_forward(x, y):
        if done[0] < count:
            done[0] += 1
            time.sleep(seconds)
        return forward(x, y)

    metrics["slow_start"] = {"steps": count, "seconds": seconds,
                             "why": "test seam %s: the first training steps slowed on purpose" % SLOW_START_VAR}
    log("%s=%s: THE FIRST %d TRAINING STEPS SLEEP %g S EACH (a test seam; this repeat's start is slow on purpose)"
        % (SLOW_START_VAR, spec, count, seconds))
    return slow_forward, backward, update


def warm_up(args, state, source, steps, timed):
    """timing.run_warmup with the options' rule; ranks vote to stop together."""
    dist, device = state["dist"], state["device"]
    rule = None
    if args.warmup_max is not None:
        rule = {"max": args.warmup_max, "max_time": args.warmup_time, "window": args.steady_window,
                "tolerance": args.steady_tolerance}
    agree = None
    if dist is not None:
        def agree(stop):
            return distributed.all_reduce_values(dist, [1.0 if stop else 0.0], "MIN", device)[0] > 0.5
    warm = timing.run_warmup(args.warmup, source, steps, device, rule, timed=timed, agree=agree)
    state["result"]["metrics"]["warmup"] = {
        "iterations": warm["done"], "seconds": warm["elapsed_s"], "how": warm["how"],
        "steady": None if rule is None else warm["how"] == "steady",
        "times": warm["times"][-500:] if (rule is not None or timed) else None}
    return warm


def calibrate(args, state, warm):
    """(iterations, metrics.calibration) from the warm-up's steady iterations (timing.calibrate); the longest any
    rank asks for."""
    dist, device = state["dist"], state["device"]
    iterations, per_iter = timing.calibrate(warm["times"], args.window_time, args.window_min, args.window_max,
                                            args.steady_window)
    if dist is not None:  # every rank runs the same window
        iterations = int(distributed.all_reduce_values(dist, [iterations], "MAX", device)[0])
    state["result"]["params"]["iterations"] = iterations
    steady = len(timing.steady_times(warm["times"]))
    if per_iter is None:
        log("window calibrated: no steady warm-up iteration to estimate from (%d warm-up iterations; the first, and "
            "any %gx slower than the fastest, are start-up): %d iterations, re-sized from the window's own times if "
            "short of %g s" % (warm["done"], timing.SLOW_FACTOR, iterations, args.window_time))
    else:
        log("window calibrated: %d iterations (%.4f s each over %d steady warm-up iterations) for at least %g s" % (
            iterations, per_iter, steady, args.window_time))
    return iterations, {"iterations": iterations, "iter_s": per_iter, "estimated_from": "warm-up",
                        "steady_warmup_iterations": steady, "given": None, "min_time": args.window_time,
                        "least": args.window_min, "most": args.window_max}


def measure(args, state, source, steps, check, watch):
    """Warm-up, calibration and the measured window(s): {"warm", "window" (None: the warm-up diverged),
    "iterations" (the final window's), "before" (every loss before the final window)}. Fills metrics.warmup, and
    with --window-time metrics.calibration and metrics.window_asked_s."""
    metrics = state["result"]["metrics"]
    calibrating = args.window_time is not None and args.iterations is None
    warm = warm_up(args, state, source, steps, calibrating)
    before = list(warm["losses"])
    diverged = check.check(warm["losses"], "warmup")
    if watch is not None:
        watch.take("warmup", warm["done"])
    if diverged:
        log("the loss became NaN or infinite in the warm-up: no measured window (diverged)")
        return {"warm": warm, "window": None, "iterations": 0, "before": before}
    iterations, cal = args.iterations, None
    if calibrating:
        iterations, cal = calibrate(args, state, warm)
    elif args.window_time is not None:  # a later repeat: the count its cell calibrated, re-sized if short
        cal = {"iterations": iterations, "iter_s": None, "estimated_from": "given", "given": iterations,
               "min_time": args.window_time, "least": args.window_min, "most": args.window_max}
    if cal is not None:  # in the result before the window (an OOM result says what was asked), final after it
        cal.update(resized=[], extended=[], capped=False, met=None)
        metrics["calibration"] = cal
        metrics["window_asked_s"] = args.window_time
    window, iterations = windows(args, state, source, steps, iterations, cal, check, watch, before)
    if calibrating:
        state["result"]["params"]["iterations"] = iterations
    return {"warm": warm, "window": window, "iterations": iterations, "before": before}


def completer(args, state, cal):
    """run_window's `extend` for a window asked to last --window-time: the iterations that complete a window a
    little short of it where it stands (timing.extension: at most timing.MAX_EXTENDS times; every rank the same
    count), each recorded in `cal["extended"]`; None without --window-time."""
    if args.window_time is None:
        return None
    dist, device = state["dist"], state["device"]

    def extend(elapsed_s, done):
        if len(cal.setdefault("extended", [])) >= timing.MAX_EXTENDS:
            return 0
        more = timing.extension(elapsed_s, done, args.window_time, args.window_max)
        if dist is not None:
            more = int(distributed.all_reduce_values(dist, [more], "MAX", device)[0])
        if more:
            cal["extended"].append({"iterations": done, "window_s": elapsed_s, "more": more})
            log("window of %d iterations at %.3f s, a little short of the %g s asked: completed with %d more "
                "iterations" % (done, elapsed_s, args.window_time, more))
        return more

    return extend


def windows(args, state, source, steps, iterations, cal, check, watch, before):
    """Measure a window; while --window-time was asked and it came out a little short, complete it where it stands
    (completer); far short (below timing.REDO_BELOW of the time: sized from a wrong estimate) with its count below
    --window-max, re-size from its own times (timing.resize) and measure again, at most timing.MAX_RESIZES times. Every attempt
    goes into `cal` (resized, capped, met); the short windows' losses are appended to `before`. Returns (the final
    window, its iterations)."""
    dist, device = state["dist"], state["device"]
    resized = cal["resized"] if cal is not None else []
    extend = completer(args, state, cal)
    while True:
        window = timing.run_window(iterations, source, steps, device, args.breakdown, dist, extend)
        iterations = window["iterations"]  # with what completed it
        diverged = check.check(window["losses"], "window")
        window_s = window["window_s"]
        if dist is not None and args.window_time is not None:  # the ranks' window: the longest
            window_s = distributed.all_reduce_values(dist, [window_s], "MAX", device)[0]
        nxt = None
        if args.window_time is not None and not diverged:
            nxt = timing.resize(window_s, window["iter_times"], iterations, args.window_time, args.window_max)
            if dist is not None:  # every rank measures the same count: the largest any rank asks for
                n = distributed.all_reduce_values(dist, [nxt[0] if nxt else 0], "MAX", device)[0]
                nxt = (int(n), nxt[1] if nxt else None) if n > 0 else None
            if nxt is not None and len(resized) >= timing.MAX_RESIZES:
                log("window of %d iterations took %.3f s, shorter than the %g s asked, after %d re-sizes: kept" % (
                    iterations, window_s, args.window_time, len(resized)))
                nxt = None
        if nxt is None:
            if watch is not None:
                watch.take("window", iterations)
            break
        if watch is not None:
            watch.take("resized", iterations)
        log("window of %d iterations took %.3f s, shorter than the %g s asked: re-sized to %d iterations (%.4f s "
            "each in that window, %d%% margin)" % (iterations, window_s, args.window_time, nxt[0], nxt[1] or 0.0,
                                                   round(100 * timing.RESIZE_MARGIN)))
        resized.append({"iterations": iterations, "window_s": window_s})
        before.extend(window["losses"])
        iterations = nxt[0]
        if cal is not None:
            cal.update(iter_s=nxt[1], estimated_from="window")
    if cal is not None:
        asked = args.window_time
        capped = window_s < asked and iterations >= args.window_max
        if capped:
            log("window of %d iterations (--window-max) took %.3f s, shorter than the %g s asked: kept (capped)" % (
                iterations, window_s, asked))
        cal.update(iterations=iterations, capped=capped, met=window_s >= asked)
    return window, iterations
