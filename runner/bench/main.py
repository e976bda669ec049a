"""bench's main: parse, train for the measured window, and report one result with a status.

`benchmark` runs the steps in order (device, environment, precision recipe, data, model, warm-up,
window, accuracy) and fills the result as it learns; `main` turns every way it can end into an exit
status and, except for bad arguments, one result line (docs/internals.md).
"""

import os
import random
import sys
import traceback

from . import compat, data, distributed, envinfo, models, precision, timing, training
from .args import min_image_size, parse_args
from .compat import first_line, log, optional_module
from .contract import EXIT_BAD_ARGS, EXIT_FAILED, EXIT_OK, EXIT_OOM, EXIT_UNSUPPORTED, LOSS_END_WINDOW
from .errors import BadArgs, Unsupported, is_dtype_gap, is_oom
from .result import ResultChannel, new_result, result_line


def resolve_device(requested, local_rank):
    torch = compat.torch
    if requested == "cpu":
        return torch.device("cpu")
    has_cuda = torch.cuda.is_available()
    if requested == "cuda" and not has_cuda:
        raise Unsupported("--device cuda but torch.cuda.is_available() is False here")
    if not has_cuda:
        return torch.device("cpu")
    index = local_rank % max(torch.cuda.device_count(), 1)
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def seed_everything(seed):
    torch = compat.torch
    random.seed(seed)
    torch.manual_seed(seed)
    np = optional_module("numpy")
    if np is not None:
        np.random.seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def benchmark(args, state):
    """Everything between parsed arguments and the result: fills state['result'] as it learns."""
    torch = compat.torch
    result = state["result"]
    metrics = result["metrics"]
    rank, world, local = state["dist_info"]
    device = resolve_device(args.device, local)
    state["device"] = device
    result["env"] = envinfo.capture_env(device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
        result["env"]["torch_threads"] = torch.get_num_threads()
    seed_everything(args.seed)
    models.check_model_available(args.model)
    plan = precision.plan_precision(args, device)
    state["plan"] = plan
    flags = precision.apply_backend_flags(plan, args, device)
    state["flags"] = flags
    result["precision"] = precision.precision_record(plan, flags, args, {})
    dist = None
    if world > 1:
        dist = distributed.init_distributed(rank, world, device)
        state["dist"] = dist
        result["env"]["hostnames"] = distributed.gather_hostnames(dist, world, device)

    source, test_ds, channels, hw, classes, info = data.load_data(
        args, device, plan, models.model_defaults(args.model), state["dist_info"])
    least = min_image_size(args.model)
    if min(hw) < least:  # the data set's own size (--image-size is checked with the arguments)
        raise BadArgs("model %s needs images of at least %dx%d, got %dx%d" % (
            args.model, least, least, hw[0], hw[1]))
    model = models.build_model(args.model, args, channels, hw, classes)
    models.check_input_size(model, args.model, channels, hw)
    result["workload"] = dict(info, input_shape=[channels, hw[0], hw[1]], num_classes=classes,
                              parameters=int(sum(p.numel() for p in model.parameters())),
                              dataset_kind=args.data_kind)
    model.train()
    model, eval_model, steps, extra = training.setup_training(model, plan, args, device, state["dist_info"])
    result["precision"] = precision.precision_record(plan, flags, args, extra)

    log("%s %s batch %d on %s%s: %d warm-up + %d measured iterations" % (
        args.model, args.precision, args.batch_size, device, " x%d ranks" % world if world > 1 else "",
        args.warmup, args.iterations))
    if args.compile and args.warmup == 0:
        log("--compile with --warmup 0: compilation time falls inside the measured window")
    loss_start = timing.run_warmup(args.warmup, source, steps)
    window = timing.run_window(args.iterations, source, steps, device, args.breakdown, dist)
    memory = timing.memory_metrics(device)
    if world > 1:  # the largest footprint of any rank (-1 stands for unknown)
        keys = ("peak_mem_allocated", "peak_mem_reserved", "device_mem_used")
        peaks = distributed.all_reduce_values(
            dist, [-1 if memory[k] is None else memory[k] for k in keys], "MAX", device)
        memory.update((k, None if v < 0 else int(v)) for k, v in zip(keys, peaks))
    metrics.update(memory)
    losses = window["losses"]
    if loss_start is None and losses:
        loss_start = losses[0]
    images = args.iterations * args.batch_size
    window_s = window["window_s"]
    data_wait = window["data_wait_s"]
    if world > 1:
        images, = distributed.all_reduce_values(dist, [images], "SUM", device)
        window_s, data_wait = distributed.all_reduce_values(dist, [window_s, data_wait], "MAX", device)
        images = int(images)
    tail = losses[-LOSS_END_WINDOW:]
    metrics.update({
        "throughput": (images / window_s) if args.iterations > 0 and window_s > 0 else None,
        "window_s": window_s, "images": images, "iter_times": window["iter_times"],
        "data_wait_s": data_wait,
        "loss_start": loss_start, "loss_end": (sum(tail) / len(tail)) if tail else None,
        "losses": losses, "breakdown": window.get("breakdown"),
    })
    if "telemetry" in window:
        metrics["telemetry"] = window["telemetry"]
    if test_ds is not None:
        prepare = data.make_prepare(plan, args)
        metrics["accuracy"] = training.evaluate(training.make_predict(eval_model, plan), eval_model, test_ds,
                                                args, device, prepare, state["dist_info"], dist)
    if args.iterations > 0:
        log("%.1f img/s over %.3f s, loss %s -> %s, accuracy %s" % (
            metrics["throughput"] or 0.0, window_s, loss_start, metrics["loss_end"], metrics["accuracy"]))


def main(argv=None):
    """Run one benchmark; returns the exit status (internals.md)."""
    torch = compat.torch
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadArgs as e:
        sys.stderr.write("bench: error: %s\n" % e)
        return EXIT_BAD_ARGS
    rank, world, local = distributed.dist_layout()
    channel = ResultChannel()
    state = {"result": new_result(args, world), "device": None, "dist_info": (rank, world, local),
             "dist": None, "plan": None, "flags": {}}
    result = state["result"]
    code = EXIT_OK
    try:
        if torch is None:
            raise Unsupported("torch is not importable here: %s" % compat.TORCH_IMPORT_ERROR)
        benchmark(args, state)
    except BadArgs as e:
        sys.stderr.write("bench: error: %s\n" % e)
        code = EXIT_BAD_ARGS
    except Unsupported as e:
        result.update(status="unsupported", reason=str(e))
        code = EXIT_UNSUPPORTED
    except Exception as e:  # every failure becomes a result with a status
        if torch is not None and is_oom(e):
            result.update(status="oom", reason=first_line(e))
            result["metrics"].update(timing.memory_metrics(state["device"]))
            code = EXIT_OOM
        elif torch is not None and is_dtype_gap(e):
            result.update(status="unsupported", reason=first_line(e))
            code = EXIT_UNSUPPORTED
        else:
            traceback.print_exc()
            result.update(status="failed", reason=first_line(e))
            code = EXIT_FAILED
    finally:
        if state["dist"] is not None:
            distributed.shutdown_distributed(state["dist"])
    try:
        if code != EXIT_BAD_ARGS and rank == 0:
            if result["env"] is None:
                result["env"] = envinfo.capture_env(state["device"])
            envinfo.add_software(result["env"])  # after the window: packages and build facts, kept once by the store
            if result["precision"] is None:
                result["precision"] = precision.precision_record(state["plan"], state["flags"], args, {})
            channel.emit(result_line(result))
    finally:
        channel.close()
    return code


def run():
    """The process entry (python bench.pyz ARGS, python -m runner.bench ARGS): main, then exit at once."""
    code = main()
    # The result is out: skip the interpreter's teardown. Debian's PyTorch 1.7 (bullseye) dies in a
    # C++ destructor at exit ("terminate called without an active exception", SIGSEGV) after a
    # run that succeeded, which would turn an ok result into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
