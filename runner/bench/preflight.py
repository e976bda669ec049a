"""Before training: can this PyTorch run kernels on this GPU at all, and which precisions have units built
for them here.

A PyTorch build carries machine code for a list of GPU architectures (sm_XY, plus PTX that the driver can
compile for newer ones). On a GPU outside that list the first kernel fails with "no kernel image is
available" or the driver spends minutes compiling PTX; a 2018 image (CUDA 9, up to sm_70) on an H100
(sm_90) is the common case. `device_features` says what was built and what the GPU has; `check` turns a
mismatch into Unsupported with one sentence. `native_units` says, per precision, whether its math ran on
units made for it (tensor cores) or without them; that record has room for a CPU entry beside the GPU's
(docs/internals.md, "What each precision ran on").
"""

from .errors import Unsupported

# The newest architecture each CUDA release can build for, and the oldest PyTorch's builds of it shipped:
# what a torch without get_arch_list() (PyTorch < 1.6) was built for, inferred from torch.version.cuda.
# (first CUDA version with this range, oldest sm, newest sm)
CUDA_ARCH_RANGES = (
    ((9, 0), 37, 70), ((10, 0), 37, 75), ((11, 0), 37, 80), ((11, 1), 37, 86), ((11, 8), 37, 90),
    ((12, 0), 50, 90), ((12, 8), 50, 120), ((13, 0), 75, 120),
)
# Tensor cores per math format: the first capability that has them.
TENSOR_CORES = (("fp16", (7, 0)), ("bf16", (8, 0)), ("tf32", (8, 0)), ("fp8", (8, 9)))
# The math format each precision's matrix products run in (fp32: plain FP32 units, no tensor cores).
PRECISION_FORMAT = {"fp32": None, "tf32": "tf32", "fp16": "fp16", "amp": "fp16", "bf16": "bf16",
                    "amp-bf16": "bf16", "fp8": "fp8"}
FP8_CAPABILITY = (8, 9)  # Ada and Hopper: the first GPUs with FP8 tensor cores


def _version_tuple(text):
    parts = []
    for p in str(text).split(".")[:2]:
        digits = "".join(ch for ch in p if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def sm_number(arch):
    """'sm_90' -> 90, 'sm_90a' -> 90, 'compute_90' -> 90; None for anything else."""
    name = str(arch)
    for prefix in ("sm_", "compute_"):
        if name.startswith(prefix):
            digits = "".join(ch for ch in name[len(prefix):] if ch.isdigit())
            return int(digits) if digits else None
    return None


def implied_arches(cuda_version):
    """['sm_37', ..., 'sm_70'] for CUDA 9.0: the range a CUDA release builds for (both ends only)."""
    v = _version_tuple(cuda_version)
    if v is None:
        return None
    chosen = None
    for first, low, high in CUDA_ARCH_RANGES:
        if v >= first:
            chosen = (low, high)
    if chosen is None:
        return None
    return ["sm_%d" % chosen[0], "sm_%d" % chosen[1]]


def runs_on(arches, capability):
    """True when machine code for `capability` is in `arches` (same major, minor at most the GPU's), or
    PTX (compute_XY) at or below it the driver can compile; None when arches are unknown."""
    if not arches:
        return None
    major, minor = capability
    cap = major * 10 + minor
    for a in arches:
        n = sm_number(a)
        if n is None:
            continue
        if str(a).startswith("sm_") and n // 10 == major and n % 10 <= minor:
            return True
    for a in arches:
        n = sm_number(a)
        if n is not None and str(a).startswith("compute_") and n <= cap:
            return True
    return False


def _range_text(arches):
    sms = sorted(set(sm_number(a) for a in arches if sm_number(a) is not None))
    if not sms:
        return ", ".join(arches)
    return "sm_%d" % sms[0] if len(sms) == 1 else "sm_%d..sm_%d" % (sms[0], sms[-1])


def tensor_cores(capability):
    """Which math formats have tensor cores on a GPU of this capability."""
    return dict((fmt, tuple(capability) >= first) for fmt, first in TENSOR_CORES)


def features(capability, arch_list, cuda_version):
    """The GPU's facts as the result records them (env.device_features): pure, for tests."""
    cap = tuple(int(x) for x in capability)
    if arch_list:
        built, source = list(arch_list), "torch.cuda.get_arch_list()"
    else:
        built, source = implied_arches(cuda_version), "torch.version.cuda %s" % cuda_version
    if arch_list:
        ok = runs_on(built, cap)
    else:  # an inferred range: every architecture between its ends
        ok = (sm_number(built[0]) <= cap[0] * 10 + cap[1] <= sm_number(built[-1])) if built else None
    ptx_only = bool(ok) and arch_list is not None and not any(
        str(a).startswith("sm_") and sm_number(a) is not None and sm_number(a) // 10 == cap[0]
        and sm_number(a) % 10 <= cap[1] for a in built)
    return {"kind": "cuda", "capability": "%d.%d" % cap, "sm": "sm_%d%d" % cap,
            "built_for": built, "built_for_source": source if built else None,
            "runs": ok, "ptx_jit": ptx_only, "tensor_cores": tensor_cores(cap)}


def mismatch(feats):
    """The sentence that says why this PyTorch cannot run on this GPU, or None when it can (or no one knows)."""
    if feats.get("kind") != "cuda" or feats.get("runs") is not False:
        return None
    text = "this PyTorch was built for %s; this GPU is %s" % (_range_text(feats["built_for"]), feats["sm"])
    if not str(feats.get("built_for_source", "")).startswith("torch.cuda"):
        text += " (inferred from %s: this torch has no torch.cuda.get_arch_list())" % feats["built_for_source"]
    return text


def device_features(device):
    """env.device_features for `device`: the GPU's record, or None on a CPU (issue 20 adds the CPU's)."""
    if device is None or device.type != "cuda":
        return None
    from .compat import torch
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(index)
    arch_list = None
    get = getattr(torch.cuda, "get_arch_list", None)
    if get is not None:
        try:
            arch_list = list(get()) or None
        except Exception:
            arch_list = None
    return features(cap, arch_list, getattr(torch.version, "cuda", None))


def check(feats):
    """Raise Unsupported with the sentence when this PyTorch has no code for this GPU."""
    why = mismatch(feats or {})
    if why:
        raise Unsupported(why)


def native_units(precision, feats):
    """precision.native: what the precision's math ran on here. `native` is True when units built for the
    format did the work, False when the precision ran without them (FP16 on a GPU before Volta), None when
    this device's record says nothing (a CPU, until the CPU side fills it in)."""
    if not feats or feats.get("kind") != "cuda":
        return {"device": feats.get("kind") if feats else None, "unit": None, "native": None}
    fmt = PRECISION_FORMAT.get(precision)
    if fmt is None:
        return {"device": "cuda", "unit": "fp32 cores", "native": True}
    has = bool(feats["tensor_cores"].get(fmt))
    if has:
        return {"device": "cuda", "unit": "%s tensor cores" % fmt, "native": True}
    return {"device": "cuda", "unit": "no %s tensor cores (%s)" % (fmt, feats["sm"]), "native": False}


def fp8_problem(device_type, capability, has_float8_dtypes, library):
    """The sentence that says why FP8 training cannot run here, or None when it can: a CPU, a GPU before
    compute capability 8.9, a torch without float8 dtypes, no FP8 training library. `library` is
    (name, None) when one is importable, (None, why) when none is."""
    if device_type != "cuda":
        return ("fp8 training needs an NVIDIA GPU with FP8 tensor cores (compute capability 8.9: Ada, Hopper "
                "or newer); this repeat runs on the %s" % ("CPU" if device_type == "cpu" else device_type))
    if tuple(capability) < FP8_CAPABILITY:
        return ("fp8 training needs FP8 tensor cores (compute capability 8.9: Ada, Hopper or newer); this GPU "
                "is %d.%d" % tuple(capability))
    if not has_float8_dtypes:
        return "this torch has no float8 dtypes (torch.float8_e4m3fn: PyTorch 2.1+), so no FP8 training"
    if library[0] is None:
        return "no FP8 training library here: %s" % library[1]
    return None
