"""bench's main: parse, train for the measured window, and report one result with a status.

`benchmark` runs the steps in order (device, environment, precision recipe, data, model, warm-up,
window, accuracy) and fills the result as it learns; `main` turns every way it can end into an exit
status and, except for bad arguments, one result line (docs/internals.md).
"""

import os
import random
import sys
import traceback

from . import (
    compat,
    data,
    distributed,
    envinfo,
    health,
    levers,
    measured,
    models,
    precision,
    preflight,
    telemetry,
    timing,
    training,
)
from .args import min_image_size, parse_args
from .attention import attention_plan
from .compat import first_line, log, optional_module
from .contract import (
    EXIT_BAD_ARGS,
    EXIT_DIVERGED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_OOM,
    EXIT_UNSUPPORTED,
    LOSS_END_WINDOW,
    TRANSFORMER_MODELS,
)
from .errors import BadArgs, Unsupported, is_dtype_gap, is_oom
from .flops import flops_per_token, mfu_metrics, mfu_text
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


def _precision_record(state, args, extra):
    """The result's "precision" record, with what the precision's math ran on (preflight.native_units)."""
    rec = precision.precision_record(state["plan"], state["flags"], args, extra)
    if state.get("features") is not None:
        rec["native"] = preflight.native_units(args.precision, state["features"])
    return rec
def set_threads(args, env):
    """--threads as asked; without it, PyTorch's own choice, lowered to the processors this process is granted
    (a cgroup quota such as docker --cpus is not in the affinity mask OpenMP counts; more threads than
    processors spin against each other at every barrier). OMP_NUM_THREADS or MKL_NUM_THREADS set by the
    environment is its choice and is kept."""
    torch = compat.torch
    granted = envinfo.threads_granted()
    env["threads_granted"] = granted
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    elif granted and torch.get_num_threads() > granted and not (
            os.environ.get("OMP_NUM_THREADS") or os.environ.get("MKL_NUM_THREADS")):
        log("%d threads for the %d processors this process is granted" % (granted, granted))
        torch.set_num_threads(granted)
    env["torch_threads"] = torch.get_num_threads()


def cpu_math(plan, device, env):
    """{"cpu_math": ...} for a repeat on the CPU (envinfo.cpu_math: is the precision's math native here?)."""
    if device is None or device.type != "cpu" or not env.get("cpu_features"):
        return {}
    return {"cpu_math": envinfo.cpu_math(plan["dtype"], env["cpu_features"])}


def loss_ladder(before, window_losses):
    """{step: loss} at the steps timing.loss_step keeps (1, 2, 5, 10, ...) and the last step, counted from the
    first training step: `before` is every loss before the window (warm-up, and windows re-sized away), so losses
    of cells whose windows differ in length compare at a step every one of them reached."""
    out = {}
    for i, value in enumerate(before):
        if timing.loss_step(i + 1):
            out[str(i + 1)] = value
    done = len(before)
    for i, value in enumerate(window_losses):
        step = done + i + 1
        if timing.loss_step(step) or i == len(window_losses) - 1:
            out[str(step)] = value
    return out


def prepare(args, state):
    """The device, the environment, the architecture preflight, threads, seeds and the precision recipe; the
    process group when there are several ranks. Returns the process group or None."""
    result = state["result"]
    rank, world, local = state["dist_info"]
    device = resolve_device(args.device, local)
    state["device"] = device
    result["env"] = envinfo.capture_env(device)
    features = preflight.device_features(device)
    if features is not None:
        result["env"]["device_features"] = features
    state["features"] = features
    preflight.check(features)  # a GPU this torch has no code for: unsupported, before any kernel runs
    set_threads(args, result["env"])
    seed_everything(args.seed)
    models.check_model_available(args.model)
    plan = precision.plan_precision(args, device)
    levers.check_levers(args, plan)  # a lever that would do nothing here is unsupported, before any model is built
    state["plan"] = plan
    state["flags"] = precision.apply_backend_flags(plan, args, device)
    result["precision"] = _precision_record(state, args, cpu_math(plan, device, result["env"]))
    dist = None
    if world > 1:
        dist = distributed.init_distributed(rank, world, device)
        state["dist"] = dist
        result["env"]["hostnames"] = distributed.gather_hostnames(dist, world, device)
    return dist


EMPTY_WINDOW = {"window_s": 0.0, "iter_times": [], "data_wait_s": 0.0, "losses": []}


def record_window(args, state, run, dist):
    """The window's metrics (throughput, memory, losses, telemetry), combined over the ranks. `run`: measured.measure's
    answer; without a window (the warm-up diverged) the figures of training that was never measured are null."""
    metrics, device = state["result"]["metrics"], state["device"]
    world = state["dist_info"][1]
    window, iterations, before = run["window"] or EMPTY_WINDOW, run["iterations"], run["before"]
    metrics["load_avg"] = envinfo.load_average()
    memory = timing.memory_metrics(device)
    if world > 1:  # the largest footprint of any rank (-1 stands for unknown)
        keys = ("peak_mem_allocated", "peak_mem_reserved", "device_mem_used")
        peaks = distributed.all_reduce_values(
            dist, [-1 if memory[k] is None else memory[k] for k in keys], "MAX", device)
        memory.update((k, None if v < 0 else int(v)) for k, v in zip(keys, peaks))
    metrics.update(memory)
    losses = window["losses"]
    loss_start = run["warm"]["first_loss"]
    if loss_start is None and losses:
        loss_start = losses[0]
    transformer = args.model in TRANSFORMER_MODELS
    images = iterations * args.batch_size * (args.seq_len if transformer else 1)  # tokens for a transformer
    window_s = window["window_s"]
    data_wait = window["data_wait_s"]
    if world > 1:
        images, = distributed.all_reduce_values(dist, [images], "SUM", device)
        window_s, data_wait = distributed.all_reduce_values(dist, [window_s, data_wait], "MAX", device)
        images = int(images)
    tail = losses[-LOSS_END_WINDOW:]
    metrics.update({
        "throughput": (images / window_s) if iterations > 0 and window_s > 0 else None,
        "window_s": window_s if run["window"] is not None else None, "images": images, "iterations": iterations,
        "iter_times": window["iter_times"], "data_wait_s": data_wait, "steps": len(before) + iterations,
        "loss_start": loss_start, "loss_end": (sum(tail) / len(tail)) if tail else None,
        "losses": losses, "loss_at": loss_ladder(before, losses), "breakdown": window.get("breakdown"),
    })
    if "telemetry" in window:  # every rank sampled its own device: combined on every rank
        metrics.update(telemetry.combine_ranks(window["telemetry"], images, world, dist, device))
    if transformer:
        transformer_metrics(metrics, state["result"], args, device, world)
    return window_s


def benchmark(args, state):
    """Everything between parsed arguments and the result: fills state['result'] as it learns; a training whose
    loss became NaN or infinite ends with status diverged (health.FiniteCheck)."""
    result = state["result"]
    metrics = result["metrics"]
    dist = prepare(args, state)
    device, plan = state["device"], state["plan"]
    transformer = args.model in TRANSFORMER_MODELS
    if transformer:
        source, test_ds, model, result["workload"] = transformer_workload(args, device, plan, state["dist_info"])
    else:
        source, test_ds, model, result["workload"] = image_workload(args, device, plan, state["dist_info"])
    model.train()
    model, eval_model, steps, extra, watch = training.setup_training(model, plan, args, device, state["dist_info"])
    extra.update(cpu_math(plan, device, result["env"]))
    result["precision"] = _precision_record(state, args, extra)
    steps = measured.slow_start(steps, metrics)
    say_plan(args, state)
    check = health.FiniteCheck(dist, device)
    run = measured.measure(args, state, source, steps, check, watch)
    window_s = record_window(args, state, run, dist)
    metrics["finite"] = check.record()
    if watch is not None:
        metrics["scaler"] = watch.record()
        watch.log_window()
    if check.diverged:
        result.update(status="diverged", reason=check.reason())
        log("diverged: %s; the figures are kept for the record, not ranked (no accuracy evaluated)" % result["reason"])
        return
    if test_ds is not None:
        prepare_batch = data.make_prepare(plan, args)
        metrics["accuracy"] = training.evaluate(training.make_predict(eval_model, plan), eval_model, test_ds,
                                                args, device, prepare_batch, state["dist_info"], dist)
    if run["iterations"] > 0:
        mfu = mfu_text(metrics)
        log("%.1f %s over %.3f s, loss %s -> %s, accuracy %s%s" % (
            metrics["throughput"] or 0.0, "tok/s" if transformer else "img/s", window_s, metrics["loss_start"],
            metrics["loss_end"], metrics["accuracy"], ", " + mfu if mfu else ""))


def say_plan(args, state):
    """The run's first line on stderr, and what the options mean for the measurement."""
    device, world = state["device"], state["dist_info"][1]
    calibrating = args.window_time is not None and args.iterations is None
    log("%s %s batch %d on %s%s: %s warm-up + %s measured iterations" % (
        args.model, args.precision, args.batch_size, device, " x%d ranks" % world if world > 1 else "",
        args.warmup if args.warmup_max is None else "%d-%d (until steady)" % (args.warmup, args.warmup_max),
        args.iterations if not calibrating else "calibrated for %gs" % args.window_time))
    if args.compile and args.warmup == 0 and args.warmup_max is None:
        log("--compile with --warmup 0: compilation time falls inside the measured window")
    cpu = state["result"]["precision"].get("cpu_math", {})
    if device.type == "cpu" and cpu.get("native") is False:
        log(cpu["why"])


def image_workload(args, device, plan, dist_info):
    """(training source, test set, model, the result's workload record) of an image model."""
    source, test_ds, channels, hw, classes, info = data.load_data(
        args, device, plan, models.model_defaults(args.model), dist_info)
    least = min_image_size(args.model)
    if min(hw) < least:  # the data set's own size (--image-size is checked with the arguments)
        raise BadArgs("model %s needs images of at least %dx%d, got %dx%d" % (
            args.model, least, least, hw[0], hw[1]))
    model = models.build_model(args.model, args, channels, hw, classes)
    models.check_input_size(model, args.model, channels, hw)
    workload = dict(info, input_shape=[channels, hw[0], hw[1]], num_classes=classes,
                    parameters=int(sum(p.numel() for p in model.parameters())), dataset_kind=args.data_kind)
    return source, test_ds, model, workload


# The dtype attention's products run in, per the plan's math format (fp8: attention stays BF16).
COMPUTE_DTYPES = {"float32": "float32", "tf32": "float32", "bfloat16": "bfloat16", "float16": "float16",
                  "float8": "bfloat16"}


def transformer_workload(args, device, plan, dist_info):
    """(token source, no test set, the GPT, the workload record) with the attention --attention asks for."""
    layers, heads, width, context, vocab = TRANSFORMER_MODELS[args.model]
    dtype = getattr(compat.torch, COMPUTE_DTYPES[plan["dtype"]])
    sdpa, kernel, attention = attention_plan(args.attention, device, dtype, heads, width // heads)
    source, info = data.load_tokens(args, device, vocab, dist_info)
    model = models.build_transformer(args.model, sdpa, kernel)
    workload = dict(info, layers=layers, heads=heads, width=width, context=context, seq_len=args.seq_len,
                    parameters=int(sum(p.numel() for p in model.parameters())),
                    position_parameters=int(model.wpe.weight.numel()), attention=attention,
                    dataset_kind=args.data_kind)
    return source, None, model, workload


def transformer_metrics(metrics, result, args, device, world):
    """Tokens, MFU and the definitions that say throughput is tok/s (and how MFU was counted); an fp8 repeat's MFU
    against the BF16 dense peak, with the share of its FLOPs that ran in FP8 (flops.py)."""
    workload, env = result["workload"], result["env"]
    fp8 = (result.get("precision") or {}).get("fp8") or {}
    per_token, formula = flops_per_token(workload["parameters"], workload["position_parameters"],
                                         workload["layers"], workload["width"], args.seq_len)
    mfu, how = mfu_metrics(metrics["throughput"], per_token, formula, device, env.get("device_name"),
                           args.precision, world, fp8.get("fp8_matmul_weights"))
    metrics.update(mfu, tokens=metrics["images"], sequences=metrics["images"] // args.seq_len)
    tok = "bench: tokens (sequences x seq_len) over the synchronised measured window"
    definitions = {"throughput": {"how": tok, "unit": "tok/s"},
                   "fwd_throughput": {"how": tok.replace("window", "forward passes"), "unit": "tok/s"},
                   "bwd_throughput": {"how": tok.replace("window", "backward passes"), "unit": "tok/s"},
                   "images_per_joule": {"how": "bench: tokens over the GPU energy of the window", "unit": "tok/J"}}
    if how is not None:
        definitions["mfu"] = {"how": how, "unit": "%"}
    metrics.setdefault("definitions", {}).update(definitions)


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
             "dist": None, "plan": None, "flags": {}, "features": None}
    result = state["result"]
    code = EXIT_OK
    try:
        if torch is None:
            raise Unsupported("torch is not importable here: %s" % compat.TORCH_IMPORT_ERROR)
        benchmark(args, state)
        if result["status"] == "diverged":
            code = EXIT_DIVERGED
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
                result["precision"] = _precision_record(state, args, {})
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
