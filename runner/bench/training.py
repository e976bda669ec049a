"""One training step wired for a precision: the model cast and laid out, the optimizer, apex, DDP and
torch.compile in the order each needs; forward, backward and update as three functions; evaluation."""

import importlib

from . import fp8
from .compat import accepted_kwargs, log, nn, torch
from .data import Shard, loader_kwargs
from .distributed import all_reduce_values
from .errors import Unsupported
from .health import ScalerWatch
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


# Why auto never pairs fused SGD with a dynamic loss scaler (precision.optimizer_why).
FUSED_UNDER_SCALER = ("fused SGD under a dynamic loss scaler corrupts momentum on the steps the scaler skips "
                      "(seen in PyTorch 2.11: every repeat of ResNet-50 amp trained to NaN)")


def optimizer_choices(want, device_type, accepted, allow_fused, dynamic_scaler):
    """The SGD implementations to try, in order, as [(name, keyword arguments)], and why, for --optimizer-impl
    `want` on `device_type`, where SGD takes the keywords `accepted`. auto: fused, else foreach, on CUDA where this
    torch has them (fused never under a dynamic loss scaler: FUSED_UNDER_SCALER, nor under apex: `allow_fused`);
    torch's default elsewhere. A named one is tried alone (make_optimizer says when this torch lacks it)."""
    if want == "plain":
        return [("plain", {"foreach": False} if "foreach" in accepted else {})], "asked for: the per-tensor loop"
    if want in ("fused", "foreach"):
        why = "asked for (--optimizer-impl %s)" % want
        if want == "fused" and dynamic_scaler:
            why += "; under a dynamic loss scaler, which auto avoids: " + FUSED_UNDER_SCALER
        return [(want, {want: True})], why
    choices = []
    why = "auto on %s: torch's default SGD (bench picks fused or foreach on CUDA only)" % device_type
    if device_type == "cuda":
        fused_ok = allow_fused and "fused" in accepted and not dynamic_scaler
        if fused_ok:
            choices.append(("fused", {"fused": True}))
        if "foreach" in accepted:
            choices.append(("foreach", {"foreach": True}))
        if fused_ok:
            why = "auto: fused, the fastest SGD this torch has on CUDA"
        elif choices and not allow_fused:
            why = "auto: foreach, not fused: apex's amp patches the optimizer's step"
        elif choices and dynamic_scaler and "fused" in accepted:
            why = "auto: foreach, not fused: " + FUSED_UNDER_SCALER
        elif choices:
            why = "auto: foreach, this torch's SGD has no fused implementation"
        else:
            why = "auto: torch's default SGD, this torch's has neither fused nor foreach"
    return choices + [("default", {})], why


def make_optimizer(params, args, device, allow_fused, dynamic_scaler=False):
    """SGD momentum 0.9 as optimizer_choices orders them: (optimizer, implementation, why). A named implementation
    this torch or device lacks is Unsupported; auto falls through to the next."""
    params = list(params)
    want = getattr(args, "optimizer_impl", "auto")
    accepted = accepted_kwargs(torch.optim.SGD.__init__)
    choices, why = optimizer_choices(want, device.type, accepted, allow_fused, dynamic_scaler)
    if want in ("fused", "foreach"):
        if want not in accepted:
            raise Unsupported("this torch's SGD has no %s implementation" % want)
        if want == "fused" and not allow_fused:
            raise Unsupported("fused SGD cannot run under apex's amp, which patches the optimizer's step")
    for impl, kwargs in choices:
        try:
            return torch.optim.SGD(params, lr=args.lr, momentum=0.9, **kwargs), impl, why
        except (RuntimeError, ValueError, TypeError) as e:
            said = str(e).splitlines()[0] if str(e) else type(e).__name__
            if want != "auto":
                raise Unsupported("SGD %s on %s: %s" % (want, device.type, said))
            log("SGD %s unavailable here (%s); trying the next" % (impl, said))
            why += "; %s unavailable here (%s)" % (impl, said)
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9), "default", why


def _zero_grad_fn(optimizer):
    """zero_grad(set_to_none=True) where it exists: frees grads instead of writing zeros."""
    if "set_to_none" in accepted_kwargs(optimizer.zero_grad):
        return lambda: optimizer.zero_grad(set_to_none=True)
    return optimizer.zero_grad


def make_steps(model, optimizer, plan, master, scaler, apex_amp, watch=None):
    """The three phases of one training step for this precision: forward(x, y) -> loss,
    backward(loss), update(). Branching happens here, once, not in the hot loop. `watch`: a health.ScalerWatch
    that counts the steps the dynamic loss scaler skips."""
    criterion = nn.CrossEntropyLoss()
    zero_grad = _zero_grad_fn(optimizer)
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
    cast -> optimizer -> apex -> DDP -> compile. Returns (model, eval model, steps, the precision record's extra
    entries, a health.ScalerWatch where a dynamic loss scaler runs, else None)."""
    extra = {}
    model = convert_model(model, plan, args, device)
    if plan["precision"] == "fp8":  # the linear layers' matrix products in FP8 (torchao or Transformer Engine)
        model, extra["fp8"] = fp8.convert(model, plan)
    master = scaler = apex_amp = watch = None
    dynamic = plan["loss_scale"] == "dynamic"
    if plan["mechanism"] == "manual":
        master = ManualMasterWeights(model.parameters(), plan["loss_scale"])
        optimizer, impl, why = make_optimizer(master.master_params, args, device, allow_fused=True)
    else:
        optimizer, impl, why = make_optimizer(model.parameters(), args, device,
                                              allow_fused=plan["mechanism"] != "apex", dynamic_scaler=dynamic)
    extra["optimizer"] = "sgd-momentum-0.9-" + impl
    extra["optimizer_why"] = why
    if plan["mechanism"] == "native" and plan["precision"] == "amp":
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
    eval_model = model
    rank, world, local = dist_info
    if world > 1:
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
    if args.compile:
        mode = getattr(args, "compile_mode", None)
        try:
            model = torch.compile(model, mode=mode) if mode else torch.compile(model)
        except RuntimeError as e:  # e.g. Dynamo refusing this Python version
            raise Unsupported("torch.compile: %s" % str(e).splitlines()[0])
    steps = make_steps(model, optimizer, plan, master, scaler, apex_amp, watch)
    if getattr(args, "cuda_graphs", False):
        if world > 1:
            raise Unsupported("whole-step CUDA graphs are not captured across ranks here (DDP's all-reduce)")
        steps = GraphedStep(steps).steps()
        extra["cuda_graphs"] = "whole step"
    return model, eval_model, steps, extra, watch


class GraphedStep(object):
    """The whole training step captured as one CUDA graph on its first call, then replayed: forward(x, y) copies
    the batch into the graph's input tensors and replays forward, backward and the optimizer's step together;
    backward and update have nothing left to do. Gradients are set to None before the capture, so the captured
    backward writes them afresh at every replay."""

    WARMUP = 3  # eager steps on a side stream before the capture (optimizer state, cuDNN's choices, autotuning)

    def __init__(self, steps):
        self.eager = steps
        self.graph = None
        self.x = self.y = self.loss = None

    def capture(self, x, y):
        forward, backward, update = self.eager
        self.x, self.y = x.clone(), y.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.WARMUP):
                backward(forward(self.x, self.y))
                update()  # ends with the gradients set to None
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.loss = forward(self.x, self.y)
            backward(self.loss)
            update()
        self.graph = graph

    def forward(self, x, y):
        if self.graph is None:
            self.capture(x, y)
        self.x.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        self.graph.replay()
        return self.loss.detach().clone()  # the graph's loss tensor is rewritten by the next replay

    def nothing(self, loss=None):
        return None

    def steps(self):
        return self.forward, self.nothing, self.nothing


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
