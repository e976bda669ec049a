"""Model FLOPs utilisation of a transformer repeat: the model FLOP/s it achieved over the device's peak for the
precision's math format.

FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B, as nanoGPT's estimate_mfu counts them):
    6 * N + 12 * L * d * T
N: the parameters without the position embedding (a lookup, no multiply; the token embedding is counted
once, its tied output projection does the multiply), L layers, d the width, T the sequence length. 6N is a
forward (2N) and a backward (4N) pass of every weight; 12*L*d*T is attention's two matrix products (QK^T and
the weighted sum of V) in both passes, the causal mask not discounted.

The peak comes from PEAKS (NVIDIA's datasheets, dense: the "with sparsity" figures halved) where the device
is listed; elsewhere, and on every CPU, from a matrix multiply of the precision's dtype the benchmark times
on the device itself, said as such in the result. An fp8 repeat's MFU is against the BF16 dense peak, the
convention of torchao and Transformer Engine (only the linear layers run in FP8; attention, norms and the
rest stay BF16), with the share of the model FLOPs that ran in FP8 beside it (fp8_flops_share).
"""

import time

from .compat import torch

TERA = 1e12
# (name fragments that must all appear, fragments that must not) -> (device, {format: dense TFLOP/s}, source)
PEAKS = (
    (("h100", "pcie"), (), "NVIDIA H100 PCIe",
     {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0, "fp8": 1513.0},
     "NVIDIA H100 Tensor Core GPU datasheet (PCIe; sparsity figures halved)"),
    (("h100",), ("nvl", "pcie"), "NVIDIA H100 SXM5",
     {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
     "NVIDIA H100 Tensor Core GPU datasheet (SXM; sparsity figures halved)"),
    (("h200",), ("nvl",), "NVIDIA H200 SXM",
     {"fp32": 67.0, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9},
     "NVIDIA H200 Tensor Core GPU datasheet (SXM; sparsity figures halved)"),
    (("a100",), (), "NVIDIA A100",
     {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0},
     "NVIDIA A100 Tensor Core GPU datasheet (SXM4 and PCIe; sparsity figures halved)"),
    (("l40s",), (), "NVIDIA L40S",
     {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05, "fp8": 733.0},
     "NVIDIA L40S datasheet (sparsity figures halved)"),
    (("l4",), ("l40",), "NVIDIA L4",
     {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0, "fp8": 242.5},
     "NVIDIA L4 Tensor Core GPU datasheet (sparsity figures halved)"),
    (("a10",), ("a100", "a10g"), "NVIDIA A10",
     {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0},
     "NVIDIA A10 Tensor Core GPU datasheet (sparsity figures halved)"),
    (("v100", "sxm2"), (), "NVIDIA V100 SXM2", {"fp32": 15.7, "fp16": 125.0},
     "NVIDIA Tesla V100 datasheet (SXM2)"),
    (("v100",), ("sxm",), "NVIDIA V100 PCIe", {"fp32": 14.0, "fp16": 112.0},
     "NVIDIA Tesla V100 datasheet (PCIe)"),
)
# The math format of each precision's matrix products (fp32 on a GPU runs with TF32 off).
FORMAT = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "amp": "fp16", "amp-bf16": "bf16", "bf16": "bf16",
          "fp8": "fp8"}
MEASURED_DTYPE = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "amp": "float16",
                  "amp-bf16": "bfloat16", "bf16": "bfloat16"}
FORMULA = "6 * N + 12 * L * d * T"
# The format whose peak an MFU is taken against, where it is not the precision's own math format.
MFU_FORMAT = {"fp8": "bf16"}


def flops_per_token(parameters, position_parameters, layers, width, seq_len):
    """(FLOPs per token, the formula with its numbers)."""
    n = parameters - position_parameters
    value = 6 * n + 12 * layers * width * seq_len
    text = "%s = 6 * %d + 12 * %d * %d * %d (N: parameters without the %d of the position embedding)" % (
        FORMULA, n, layers, width, seq_len, position_parameters)
    return value, text


def peak_format(precision):
    """The math format of the peak an MFU divides by: the precision's own, BF16 for fp8 (MFU_FORMAT)."""
    return MFU_FORMAT.get(precision, FORMAT.get(precision))


def table_entry(device_name, fmt):
    """(device, dense TFLOP/s, source) from PEAKS for this device and math format, or None when it is not listed."""
    name = str(device_name or "").lower()
    for need, refuse, device, peaks, source in PEAKS:
        if all(f in name for f in need) and not any(f in name for f in refuse):
            return (device, peaks[fmt], source) if fmt in peaks else None
    return None


def table_peak(device_name, precision, fmt=None):
    """(peak FLOP/s, words) from PEAKS for this device and precision (or the format `fmt`), or None when it is not
    listed."""
    fmt = fmt or FORMAT.get(precision)
    entry = table_entry(device_name, fmt)
    if entry is None:
        return None
    device, tflops, source = entry
    return tflops * TERA, "%s %s dense peak %.1f TFLOP/s, from %s" % (device, fmt, tflops, source)


def fp8_flops_share(fp8_matmul_weights, per_token):
    """The share of the model FLOPs per token that ran in FP8: the converted linear layers' matrix products, forward
    and backward (6 x in x out per token, as 6N counts every weight), over the whole count (6N + 12LdT)."""
    if not fp8_matmul_weights or not per_token:
        return None
    return 6.0 * fp8_matmul_weights / per_token


def measure_peak(device, precision, budget_s=1.0):
    """(best FLOP/s, words) of a square matrix multiply in the dtype of the precision's MFU format (peak_format:
    BF16 for fp8) on `device`, timed here; None without such a dtype."""
    name = MEASURED_DTYPE.get(precision) or MEASURED_DTYPE.get(peak_format(precision))
    if name is None or not hasattr(torch, name):
        return None
    dtype = getattr(torch, name)
    n = 4096 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    best = None
    spent = 0.0
    runs = 0
    torch.matmul(a, b)  # warm-up: thread pools, kernel choice
    while runs < 3 or (spent < budget_s and runs < 50):
        _sync(device)
        start = time.perf_counter()
        torch.matmul(a, b)
        _sync(device)
        took = time.perf_counter() - start
        spent += took
        runs += 1
        best = took if best is None else min(best, took)
    value = 2.0 * n ** 3 / best
    return value, "measured: the best of %d %dx%d %s matrix multiplies on this %s, %.1f GFLOP/s, %d threads" % (
        runs, n, n, name, "GPU" if device.type == "cuda" else "CPU", value / 1e9, torch.get_num_threads())


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mfu_metrics(tokens_per_s, per_token, formula, device, device_name, precision, world, fp8_matmul_weights=None):
    """The result's mfu entries: the achieved model FLOP/s, the peak of the precision's MFU format (peak_format;
    table or measured), their ratio, the peak's name, and for fp8 the share of the FLOPs that ran in FP8."""
    fmt = peak_format(precision)
    entry = table_entry(device_name, fmt) if device.type == "cuda" else None
    peak = table_peak(device_name, precision, fmt) if entry is not None else None
    kind = "the device's %s dense peak in bench's table" % fmt.upper()
    name = "%s %s dense %.1f TFLOP/s" % (entry[0].replace("NVIDIA ", ""), fmt.upper(), entry[1]) if entry else None
    if peak is None:
        peak = measure_peak(device, precision)
        kind = "a %s peak bench measured (a matrix multiply on the device)" % fmt.upper()
        name = "%s measured %.1f TFLOP/s" % (fmt.upper(), peak[0] / TERA) if peak is not None else None
    achieved = tokens_per_s * per_token if tokens_per_s else None
    out = {"flops_per_token": per_token, "flops_formula": formula, "model_flops": achieved,
           "peak_flops": None, "peak_source": None, "peak_format": fmt, "peak_name": None, "mfu": None}
    if precision == "fp8":
        out["fp8_flops_share"] = fp8_flops_share(fp8_matmul_weights, per_token)
    if peak is None:
        out["peak_source"] = "no peak: %s is not in bench's table and %s has no plain dtype to time" % (
            device_name, precision)
        return out, None
    out["peak_flops"] = peak[0] * world
    out["peak_source"] = peak[1] + (" (x %d devices)" % world if world > 1 else "")
    out["peak_name"] = name
    if achieved:
        out["mfu"] = achieved / out["peak_flops"]
    how = "model FLOP/s (%s per token x tok/s) over %s" % (FORMULA, kind)
    if precision == "fp8":
        how += " (the convention of torchao and Transformer Engine: only the linear layers run in FP8)"
    return out, how


def mfu_text(metrics):
    """The log's words for a repeat's MFU: "MFU 29.2% of the BF16 dense peak (FP8 share of FLOPs 87%)"."""
    if not metrics.get("mfu"):
        return ""
    fmt = str(metrics.get("peak_format") or "").upper()
    source = str(metrics.get("peak_source") or "")
    text = "MFU %.1f%% of the %s %s peak" % (100 * metrics["mfu"], fmt, "measured" if source.startswith(
        "measured") else "dense")
    share = metrics.get("fp8_flops_share")
    if share:
        text += " (FP8 share of FLOPs %.0f%%)" % (100 * share)
    return text
