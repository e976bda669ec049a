"""One training step wired for a precision: the model cast and laid out, the optimizer, apex, DDP and
torch.compile in the order each needs; forward, backward and update as three functions; evaluation."""

import importlib

from . import fp8, levers
from .compat import accepted_kwargs, nn, torch
from .data import Shard, loader_kwargs
from .distributed import all_reduce_values
from .errors import Unsupported
from .graphs import GraphedStep, undo_warmup
from .health import ScalerWatch
from .optim import FUSED_UNDER_SCALER, make_optimizer, optimizer_choices  # noqa: F401 (their old home)
from .precision import ManualMasterWeights, make_grad_scaler


def convert_model(model, plan, args, device):
    """Move to the device, cast for fp16/bf16 (BN back to FP32 for master weights), set layout."""
    model = model.to(device)
    if plan["model_dtype"] is not None:
        model = model.to(plan["model_dtype"])
        if plan["bn_fp32"]:
            for m in model.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.float()
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _zero_grad_fn(optimizer):
    """zero_grad(set_to_none=True) where it exists: frees grads instead of writing zeros."""
    if "set_to_none" in accepted_kwargs(optimizer.zero_grad):
        return lambda: optimizer.zero_grad(set_to_none=True)
    return optimizer.zero_grad


def unscale_fn(optimizer, scale):
    """update()'s first part under a static loss scale: every gradient times 1/scale, on the device (one
    _foreach_mul_ where this torch has it), no check: an overflow reaches the weights and the finite check sees it."""
    inv = 1.0 / float(scale)
    foreach = getattr(torch, "_foreach_mul_", None)

    def unscale():
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if foreach is not None:
            foreach(grads, inv)
        else:
            for g in grads:
                g.mul_(inv)
    return unscale


def make_steps(model, optimizer, plan, master, scaler, apex_amp, watch=None, criterion=None):
    """The three phases of one training step for this precision: forward(x, y) -> loss,
    backward(loss), update(). Branching happens here, once, not in the hot loop. `watch`: a health.ScalerWatch
    that counts the steps the dynamic loss scaler skips; `criterion`: the loss of the model's output (default: the
    cross-entropy of logits; levers.chunked_loss for a GPT that returns its hidden states). A numeric
    plan["loss_scale"] with native autocast is a static scale: the loss times it, the gradients times its inverse."""
    criterion = criterion or nn.CrossEntropyLoss()
    zero_grad = _zero_grad_fn(optimizer)
    static = plan.get("loss_scale") if plan.get("mechanism") == "native" and master is None else None
    autocast = plan["autocast"]
    low = plan["model_dtype"] is not None

    if autocast is not None:
        def forward(x, y):
            with autocast():
                return criterion(model(x), y)
    elif low:
        def forward(x, y):
            return criterion(model(x).float(), y)  # loss in FP32
    else:
        def forward(x, y):
            return criterion(model(x), y)

    if master is not None:
        backward = master.backward

        def update():
            master.grads_to_master()
            optimizer.step()
            master.master_to_model()
            master.zero_grad()
    elif isinstance(static, float):
        unscale = unscale_fn(optimizer, static)

        def backward(loss):
            (loss * static).backward()

        def update():
            unscale()
            optimizer.step()
            zero_grad()
    elif scaler is not None:
        def backward(loss):
            scaler.scale(loss).backward()

        def update():
            before = watch.before_update() if watch is not None else None
            scaler.step(optimizer)
            scaler.update()
            if watch is not None:
                watch.after_update(before)
            zero_grad()
    else:
        if apex_amp is not None:
            def backward(loss):
                with apex_amp.scale_loss(loss, optimizer) as scaled:
                    scaled.backward()
                if watch is not None:
                    watch.after_apex_backward()
        else:
            def backward(loss):
                loss.backward()

        def update():
            optimizer.step()
            zero_grad()
    return forward, backward, update


def make_predict(model, plan):
    """Inference forward for evaluation, under the same precision as training."""
    autocast = plan["autocast"]
    if autocast is None:
        return model

    def predict(x):
        with autocast():
            return model(x)
    return predict


def setup_training(model, plan, args, device, dist_info):
    """Model, optimizer and precision machinery wired in the order each needs:
    cast -> the transformer's levers -> optimizer -> apex -> DDP -> compile -> CUDA graph. Returns (model, eval model,
    steps, the precision record's extra entries, a health.ScalerWatch where a dynamic loss scaler runs, else None)."""
    extra = {}
    model = convert_model(model, plan, args, device)
    if plan["precision"] == "fp8":  # the linear layers' matrix products in FP8 (torchao or Transformer Engine)
        model, extra["fp8"] = fp8.convert(model, plan)
    criterion = transformer_levers(model, args, extra)
    model, optimizer, master, scaler, apex_amp, watch = wire_precision(model, plan, args, device, extra)
    eval_model = model
    world = dist_info[1]
    if world > 1:
        model = wrap_ddp(model, device, extra)
    if args.compile:
        model = compile_model(model, args, extra)
    steps = make_steps(model, optimizer, plan, master, scaler, apex_amp, watch, criterion)
    if getattr(args, "cuda_graphs", False):
        if world > 1:
            raise Unsupported("whole-step CUDA graphs are not captured across ranks here (DDP's all-reduce)")
        steps = GraphedStep(steps, undo_warmup(model, optimizer)).steps()
        extra["cuda_graphs"] = "whole step"
    return model, eval_model, steps, extra, watch


def transformer_levers(model, args, extra):
    """--checkpoint and --loss-impl chunked on the GPT itself, before anything wraps it (levers.check_levers refused
    them already where they cannot apply); returns the loss the step uses (None: cross-entropy of the logits)."""
    if getattr(args, "checkpoint", False):
        extra.update(levers.apply_checkpoint(model))
    if getattr(args, "loss_impl", "plain") != "chunked":
        return None
    model.hidden_only = True
    extra["loss_chunk_rows"] = levers.CE_CHUNK_ROWS
    return levers.chunked_loss(model.head.weight)


def wire_precision(model, plan, args, device, extra):
    """The optimizer over the model's (or the manual recipe's master) weights, a GradScaler for a dynamic loss scale,
    apex's amp: (model, optimizer, master weights, scaler, apex's amp, the scaler's watch)."""
    master = scaler = apex_amp = watch = None
    dynamic = plan["loss_scale"] == "dynamic"
    if plan["mechanism"] == "manual":
        master = ManualMasterWeights(model.parameters(), plan["loss_scale"])
        optimizer, impl, why, record = make_optimizer(master.master_params, args, device, allow_fused=True)
    else:
        optimizer, impl, why, record = make_optimizer(model.parameters(), args, device,
                                                      allow_fused=plan["mechanism"] != "apex", dynamic_scaler=dynamic)
    extra.update(record)
    extra["optimizer_why"] = why
    if plan["mechanism"] == "native" and dynamic:
        scaler = make_grad_scaler()
        watch = ScalerWatch("native", scaler=scaler)
    if plan["mechanism"] == "apex":
        apex_amp = importlib.import_module("apex.amp")
        if hasattr(apex_amp, "initialize"):
            quiet = {"verbosity": 0} if "verbosity" in accepted_kwargs(apex_amp.initialize) else {}
            model, optimizer = apex_amp.initialize(model, optimizer, opt_level="O1", loss_scale="dynamic",
                                                   **quiet)
            extra["apex_api"] = "initialize(O1)"
        else:  # 2018 apex: amp.init() returns a handle that owns scale_loss
            apex_amp = apex_amp.init(enabled=True)
            extra["apex_api"] = "init"
        watch = ScalerWatch("apex", apex_amp=apex_amp)
    return model, optimizer, master, scaler, apex_amp, watch


def wrap_ddp(model, device, extra):
    from torch.nn.parallel import DistributedDataParallel as DDP
    kwargs = {}
    if device.type == "cuda":
        kwargs["device_ids"] = [device.index]
        kwargs["output_device"] = device.index
    if "gradient_as_bucket_view" in accepted_kwargs(DDP.__init__):
        kwargs["gradient_as_bucket_view"] = True
    try:
        model = DDP(model, **kwargs)
        extra["ddp"] = "DistributedDataParallel"
    except (IndexError, AssertionError):
        # torch 1.0's DDP is CUDA-only (it indexes device_ids before any collective);
        # its CPU twin takes over where it exists.
        ddp_cpu = getattr(torch.nn.parallel, "DistributedDataParallelCPU", None)
        if device.type == "cuda" or ddp_cpu is None:
            raise
        model = ddp_cpu(model)
        extra["ddp"] = "DistributedDataParallelCPU"
    return model


# Under --cuda-graphs the whole step is one graph already: a compile mode that would capture graphs of its own runs
# without them (reduce-overhead, which is nothing else, is refused: precision.check_cuda_graphs).
MODE_UNDER_GRAPHS = {"max-autotune": "max-autotune-no-cudagraphs"}


def compile_model(model, args, extra):
    """torch.compile with --compile-mode; the mode that ran is recorded where the whole-step graph changed it."""
    mode = getattr(args, "compile_mode", None)
    if mode and getattr(args, "cuda_graphs", False) and mode in MODE_UNDER_GRAPHS:
        mode = MODE_UNDER_GRAPHS[mode]
        extra["compile_mode_ran"] = mode + " (the whole step is one CUDA graph already)"
    try:
        return torch.compile(model, mode=mode) if mode else torch.compile(model)
    except RuntimeError as e:  # e.g. Dynamo refusing this Python version
        raise Unsupported("torch.compile: %s" % str(e).splitlines()[0])


def evaluate(predict, model, test_ds, args, device, prepare, dist_info, dist):
    """Top-1 accuracy on the test split, sharded over ranks and summed."""
    from torch.utils.data import DataLoader
    rank, world, _ = dist_info
    ds = Shard(test_ds, rank, world) if world > 1 else test_ds
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=False, drop_last=False,
                        **loader_kwargs(args, device, None, False))
    was_training = model.training
    model.eval()
    correct = torch.zeros((), dtype=torch.long, device=device)
    total = 0
    with torch.no_grad():
        for i, (x, y) in enumerate(loader):
            if args.eval_batches is not None and i >= args.eval_batches:
                break
            x = prepare(x.to(device, non_blocking=True))
            y = y.to(device, non_blocking=True)
            out = predict(x)
            correct += (out.argmax(1) == y).sum()
            total += int(y.size(0))
    model.train(was_training)
    counts = [float(correct.item()), float(total)]
    if world > 1:
        counts = all_reduce_values(dist, counts, "SUM", device)
    return (counts[0] / counts[1]) if counts[1] > 0 else None
