"""Precision recipes: how each precision runs in this torch on this device (native autocast and
GradScaler, apex, hand-made FP16 master weights, bf16, TF32 switches), decided before any work and
recorded with the result."""

import os
import shutil

from . import fp8
from .compat import accepted_kwargs, optional_module, torch
from .contract import AMP_IMPLS
from .errors import BadArgs, Unsupported

MANUAL_LOSS_SCALE = 256.0  # the manual FP16 recipe's static loss scale unless --loss-scale gives one (apex's 2018)


class ManualMasterWeights(object):
    """Pre-AMP mixed precision: FP16 model, FP32 master weights, a static loss scale.

    The optimizer steps the FP32 masters; their values are copied back into the model.
    Gradients are unscaled in FP32 so small FP16 gradients survive the scaling round trip.
    """

    def __init__(self, model_params, loss_scale):
        self.model_params = [p for p in model_params if p.requires_grad]
        self.master_params = []
        for p in self.model_params:
            m = p.detach().clone().float()
            m.requires_grad = True
            self.master_params.append(m)
        self.loss_scale = float(loss_scale)

    def backward(self, loss):
        (loss * self.loss_scale).backward()

    def grads_to_master(self):
        inv = 1.0 / self.loss_scale
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.detach().float() * inv

    def master_to_model(self):
        with torch.no_grad():
            for p, m in zip(self.model_params, self.master_params):
                p.copy_(m)

    def zero_grad(self):
        for p in self.model_params:
            p.grad = None
        for m in self.master_params:
            m.grad = None


def amp_capabilities(torch_mod=None):
    """Which FP16 mixed-precision mechanisms exist here: native torch AMP, apex.amp."""
    t = torch if torch_mod is None else torch_mod
    cuda_amp = getattr(getattr(t, "cuda", None), "amp", None)
    native = cuda_amp is not None and hasattr(cuda_amp, "GradScaler") and hasattr(cuda_amp, "autocast")
    apex_amp = optional_module("apex.amp")
    apex = apex_amp is not None and (hasattr(apex_amp, "initialize") or hasattr(apex_amp, "init"))
    return {"native": bool(native), "apex": bool(apex)}


def choose_amp_impl(requested, caps):
    """FP16 AMP mechanism: native GradScaler, else apex, else manual master weights; forcing a
    missing one is Unsupported."""
    if requested not in AMP_IMPLS:
        raise BadArgs("--amp-impl must be one of %s" % ", ".join(AMP_IMPLS))
    if requested == "auto":
        if caps.get("native"):
            return "native"
        if caps.get("apex"):
            return "apex"
        return "manual"
    if requested == "native" and not caps.get("native"):
        raise Unsupported("native AMP (torch.cuda.amp.GradScaler/autocast) is not in this torch")
    if requested == "apex" and not caps.get("apex"):
        raise Unsupported("apex.amp is not installed in this environment")
    return requested


def autocast_factory(device_type, dtype, cache=True):
    """A no-argument function returning an autocast context for device_type/dtype, or None. `cache`: False for a
    step captured in a CUDA graph (autocast's cast cache must not outlive the capture)."""
    if hasattr(torch, "autocast"):  # torch >= 1.10: one API for every device
        if not cache:
            return lambda: torch.autocast(device_type, dtype=dtype, cache_enabled=False)
        return lambda: torch.autocast(device_type, dtype=dtype)
    if device_type == "cuda" and hasattr(getattr(torch.cuda, "amp", None), "autocast"):
        if "dtype" in accepted_kwargs(torch.cuda.amp.autocast):
            return lambda: torch.cuda.amp.autocast(dtype=dtype)
        if dtype == torch.float16:
            return lambda: torch.cuda.amp.autocast()
    if device_type == "cpu" and hasattr(getattr(getattr(torch, "cpu", None), "amp", None), "autocast"):
        return lambda: torch.cpu.amp.autocast(dtype=dtype)
    return None


def make_grad_scaler():
    if hasattr(getattr(torch, "amp", None), "GradScaler"):
        try:
            return torch.amp.GradScaler("cuda")
        except TypeError:
            pass
    return torch.cuda.amp.GradScaler()


def _capability(device):
    return tuple(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None


def _bf16_on_device(device):
    """BF16 arithmetic: CPU where torch has the dtype; CUDA from Ampere (capability 8.0) on."""
    if not hasattr(torch, "bfloat16"):
        raise Unsupported("this torch has no bfloat16 dtype")
    if device.type == "cuda":
        cap = _capability(device)
        if cap < (8, 0):
            raise Unsupported("bf16 needs an Ampere or newer GPU (capability 8.0), this one is %d.%d" % cap)


def plan_precision(args, device, caps=None):
    """Decide how the requested precision runs here, or raise Unsupported. Pure: changes nothing."""
    p = args.precision
    cuda = device.type == "cuda"
    plan = {"precision": p, "mechanism": "none", "dtype": "float32", "model_dtype": None,
            "input_dtype": None, "autocast": None, "loss_scale": None, "tf32": None,
            "bn_fp32": False}
    if cuda:
        plan["tf32"] = False  # fp32 means fp32: TF32 is switched off unless asked for
    if p == "tf32":
        if not cuda:
            raise Unsupported("tf32 is not supported on CPU: it needs a CUDA GPU (Ampere or newer)")
        cap = _capability(device)
        if cap < (8, 0):
            raise Unsupported("tf32 needs an Ampere or newer GPU (capability 8.0), this one is %d.%d" % cap)
        if not has_tf32_switches():
            raise Unsupported("this torch has no TF32 switches (torch.backends.cuda.matmul.allow_tf32)")
        plan.update(tf32=True, dtype="tf32")
    elif p == "fp16":
        if not cuda:
            raise Unsupported("fp16 training is not supported on CPU")
        plan.update(dtype="float16", model_dtype=torch.float16, input_dtype=torch.float16)
    elif p == "bf16":
        _bf16_on_device(device)
        plan.update(dtype="bfloat16", model_dtype=torch.bfloat16, input_dtype=torch.bfloat16)
    elif p == "amp":
        if not cuda:
            hint = "; amp-bf16 is" if autocast_factory("cpu", getattr(torch, "bfloat16", None)) else ""
            raise Unsupported("amp (FP16 mixed precision) is not supported on CPU" + hint)
        impl = choose_amp_impl(args.amp_impl, caps if caps is not None else amp_capabilities())
        plan.update(mechanism=impl, dtype="float16")
        static = getattr(args, "loss_scale", None)
        if impl == "native":  # a static --loss-scale replaces the GradScaler: no host decision in the step
            plan.update(autocast=autocast_factory("cuda", torch.float16),
                        loss_scale="dynamic" if static is None else float(static))
        elif impl == "apex":
            if static is not None:
                raise Unsupported("bench runs apex's amp with its dynamic loss scaler only; a static --loss-scale "
                                  "runs with --amp-impl native or manual")
            plan.update(loss_scale="dynamic")
        else:
            plan.update(model_dtype=torch.float16, input_dtype=torch.float16, bn_fp32=True,
                        loss_scale=float(MANUAL_LOSS_SCALE if static is None else static))
    elif p == "amp-bf16":
        if args.amp_impl not in ("auto", "native"):
            raise Unsupported("amp-bf16 exists only as native autocast, not %s" % args.amp_impl)
        _bf16_on_device(device)
        factory = autocast_factory(device.type, torch.bfloat16)
        if factory is None:
            raise Unsupported("this torch has no bf16 autocast for %s" % device.type)
        plan.update(mechanism="native", dtype="bfloat16", autocast=factory)
    elif p == "fp8":
        plan.update(fp8.plan_fp8(args, device, _capability(device)))
    if getattr(args, "loss_scale", None) is not None and p != "amp":
        raise Unsupported("--loss-scale is FP16 amp's (native autocast or the manual recipe); %s has no loss "
                          "scaling to set" % p)
    if args.channels_last and not hasattr(torch, "channels_last"):
        raise Unsupported("this torch has no channels_last memory format")
    if args.compile and not hasattr(torch, "compile"):
        raise Unsupported("this torch has no torch.compile")
    if args.compile and device.type == "cpu" and not _cxx_compiler():
        raise Unsupported("torch.compile on the CPU needs a C++ compiler (inductor), none here (CXX, c++, g++)")
    if getattr(args, "cuda_graphs", False):
        check_cuda_graphs(plan, device, args)
        if plan["autocast"] is not None and plan["mechanism"] == "native":
            plan["autocast"] = autocast_factory(device.type, torch.bfloat16 if plan["dtype"] == "bfloat16"
                                                else torch.float16, cache=False)
    return plan


def check_cuda_graphs(plan, device, args=None):
    """The whole training step as one CUDA graph: a CUDA device, a torch that has graphs, and a step with no
    host decision in it (a dynamic loss scale checks the gradients for inf/NaN on the host at every step; a
    static one, native or the manual recipe's, does not), nor a compile mode that captures graphs of its own."""
    if device.type != "cuda":
        raise Unsupported("CUDA graphs need a CUDA device; this run trains on %s" % device.type)
    if not hasattr(torch.cuda, "CUDAGraph") or not hasattr(torch.cuda, "graph"):
        raise Unsupported("this torch has no torch.cuda.CUDAGraph (whole-step CUDA graphs came in PyTorch 1.10)")
    if plan["mechanism"] == "apex" or plan["loss_scale"] == "dynamic":
        raise Unsupported("CUDA graphs cannot capture the %s FP16 recipe: its dynamic loss scaling decides on the "
                          "host at every step (a static --loss-scale, or amp-bf16, needs no host decision)"
                          % plan["mechanism"])
    if args is not None and args.compile and getattr(args, "compile_mode", None) == "reduce-overhead":
        raise Unsupported("torch.compile's reduce-overhead mode captures CUDA graphs of its own; with --cuda-graphs "
                          "the whole step is one graph already: compile_mode default or max-autotune")


def _cxx_compiler():
    """The C++ compiler torch.compile's CPU backend would call, or None."""
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def apply_backend_flags(plan, args, device):
    """Set TF32 and cudnn.benchmark for this run; return what is in force (None: not applicable)."""
    flags = {"tf32_matmul": None, "tf32_cudnn": None, "cudnn_benchmark": None}
    if device.type != "cuda":
        return flags
    if not has_tf32_switches():
        # torch < 1.7 has no TF32 at all
        return dict(flags, tf32_matmul=False, tf32_cudnn=False, cudnn_benchmark=_set_cudnn_benchmark(args))
    # Only the legacy allow_tf32 switches: setting them works on every version, while mixing them
    # with the newer fp32_precision API makes the getters raise. fp32 and tf32 set both; other
    # precisions keep this torch's defaults and record them.
    for key, owner in (("tf32_matmul", torch.backends.cuda.matmul), ("tf32_cudnn", torch.backends.cudnn)):
        try:
            if plan["precision"] in ("fp32", "tf32"):
                owner.allow_tf32 = bool(plan["tf32"])
            flags[key] = bool(owner.allow_tf32)
        except RuntimeError:  # the environment used the new API: the legacy state is undefined
            flags[key] = None
    flags["cudnn_benchmark"] = _set_cudnn_benchmark(args)
    return flags


def _set_cudnn_benchmark(args):
    torch.backends.cudnn.benchmark = bool(args.cudnn_benchmark)
    return bool(torch.backends.cudnn.benchmark)


def has_tf32_switches():
    """TF32 switches exist (torch >= 1.7); probed on the C side since the Python getters can raise."""
    return hasattr(torch._C, "_get_cublas_allow_tf32") and hasattr(torch._C, "_get_cudnn_allow_tf32")


def precision_record(plan, flags, args, extra):
    """The result's "precision" object: the mechanism that ran and the switches in force."""
    rec = {"mechanism": plan["mechanism"] if plan else "none",
           "dtype": plan["dtype"] if plan else None,
           "loss_scale": plan["loss_scale"] if plan else None,
           "tf32_matmul": flags.get("tf32_matmul"), "tf32_cudnn": flags.get("tf32_cudnn"),
           "channels_last": bool(args.channels_last),
           "cudnn_benchmark": flags.get("cudnn_benchmark"), "compile": bool(args.compile),
           "compile_mode": getattr(args, "compile_mode", None) if args.compile else None,
           "cuda_graphs": bool(getattr(args, "cuda_graphs", False)),
           "optimizer_impl": getattr(args, "optimizer_impl", "auto"),
           "loss_impl": getattr(args, "loss_impl", "plain"),
           "checkpoint": bool(getattr(args, "checkpoint", False)),
           "data_on_device": getattr(args, "data_kind", None) == "synthetic",
           "autocast": bool(plan and plan["autocast"] is not None),
           "master_weights": bool(plan and plan["mechanism"] == "manual"),
           "bn_fp32": bool(plan and plan["bn_fp32"])}
    if plan and plan["precision"] == "fp8":
        rec["fp8_recipe"] = plan["fp8_recipe"]
    rec.update(extra)
    return rec
