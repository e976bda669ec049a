#!/usr/bin/env python
"""matrix's benchmark: train a model for a measured window and print one MATRIX_RESULT line.

This file is copied into every environment and run by whatever Python and PyTorch live there,
from Python 3.6 / PyTorch 0.4 (2018 NGC images) to today. It must stay self-contained: standard
library + torch, with torchvision, numpy, apex and pynvml used only when present. Features are
probed, never inferred from version numbers. The command line and the JSON result are the
contract in docs/internals.md.
"""

import argparse
import contextlib
import importlib
import inspect
import json
import math
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import time
import traceback

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    TORCH_IMPORT_ERROR = None
except ImportError as _exc:  # the result still says why, as an unsupported environment
    torch = None
    nn = None
    F = None
    TORCH_IMPORT_ERROR = str(_exc)

SCHEMA = 1
RESULT_PREFIX = "MATRIX_RESULT "
EXIT_OK, EXIT_FAILED, EXIT_BAD_ARGS, EXIT_OOM, EXIT_UNSUPPORTED = 0, 1, 2, 3, 4
PRECISIONS = ("fp32", "tf32", "fp16", "amp", "amp-bf16", "bf16")
AMP_IMPLS = ("auto", "native", "apex", "manual")
DEVICES = ("auto", "cpu", "cuda")
DATASET_KINDS = ("npz", "cifar10", "imagefolder")  # KIND:PATH, besides "synthetic"
LOSS_END_WINDOW = 5  # loss_end is the mean of this many last measured iterations

# name -> (input channels, default image size, default classes)
TORCHVISION_MODELS = {
    "resnet18": (3, 224, 1000), "resnet34": (3, 224, 1000), "resnet50": (3, 224, 1000),
    "resnet101": (3, 224, 1000), "resnet152": (3, 224, 1000),
    "vgg16": (3, 224, 1000), "vgg16_bn": (3, 224, 1000),
    "wide_resnet50_2": (3, 224, 1000), "resnext50_32x4d": (3, 224, 1000),
    "mobilenet_v2": (3, 224, 1000), "densenet121": (3, 224, 1000),
}
BUILTIN_MODELS = {
    "cifar_vgg16": (3, 32, 10), "wrn": (3, 32, 10), "mnist_cnn": (1, 28, 10), "mlp": (1, 28, 10),
}
MIN_IMAGE_SIZE = {"cifar_vgg16": 32, "wrn": 4, "mnist_cnn": 6, "mlp": 1}


class BadArgs(Exception):
    """The invocation cannot be right (exit 2, one line, no result)."""


class Unsupported(Exception):
    """This environment or device cannot run the requested combination (exit 4, a result)."""


def log(msg):
    """Progress goes to stderr: stdout carries only the result line."""
    sys.stderr.write("[bench] %s\n" % msg)
    sys.stderr.flush()


# ----------------------------------------------------------------------------- arguments

class _ArgParser(argparse.ArgumentParser):
    """argparse that fails with exit 2 and one line, as internals.md asks."""

    def error(self, message):
        sys.stderr.write("%s: error: %s\n" % (self.prog, " ".join(str(message).split())))
        sys.exit(EXIT_BAD_ARGS)


def build_parser():
    p = _ArgParser(prog="bench.py", description="Train a model for a measured window and print "
                   "one MATRIX_RESULT JSON line on stdout (docs/internals.md).")
    p.add_argument("--model", required=True,
                   help="torchvision: %s; built-in: %s" % (", ".join(sorted(TORCHVISION_MODELS)),
                                                            ", ".join(sorted(BUILTIN_MODELS))))
    p.add_argument("--precision", required=True, choices=PRECISIONS)
    p.add_argument("--batch-size", required=True, type=int, help="per process (per rank)")
    p.add_argument("--dataset", required=True,
                   help="synthetic | npz:PATH | cifar10:DIR | imagefolder:DIR")
    p.add_argument("--iterations", type=int, default=50, help="measured iterations (0: no training)")
    p.add_argument("--warmup", type=int, default=10, help="discarded iterations before the window")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", choices=DEVICES, default="auto")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--cudnn-benchmark", action="store_true")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--workers", type=int, default=4, help="DataLoader workers for real data")
    p.add_argument("--loss-scale", type=float, default=256.0,
                   help="static loss scale of the manual FP16 master-weights path")
    p.add_argument("--breakdown", action="store_true",
                   help="time forward/backward/optimizer (synchronises after every phase)")
    p.add_argument("--image-size", type=int, default=None, help="input height and width")
    p.add_argument("--num-classes", type=int, default=None)
    p.add_argument("--wrn-depth", type=int, default=28)
    p.add_argument("--wrn-width", type=int, default=10)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--amp-impl", choices=AMP_IMPLS, default="auto",
                   help="force the FP16 mixed-precision mechanism of --precision amp")
    p.add_argument("--eval-batches", type=int, default=None, help="cap on test batches evaluated")
    p.add_argument("--synthetic-batches", type=int, default=4,
                   help="size of the pool of synthetic batches generated once on the device")
    return p


def parse_dataset(spec):
    """'synthetic' or KIND:PATH, checked for existence so a typo fails before any work."""
    if spec == "synthetic":
        return "synthetic", None
    kind, sep, path = spec.partition(":")
    if not sep or kind not in DATASET_KINDS or not path:
        raise BadArgs("--dataset %r: expected synthetic, npz:PATH, cifar10:DIR or imagefolder:DIR" % spec)
    path = os.path.expanduser(path)
    if kind == "npz" and not os.path.isfile(path):
        raise BadArgs("--dataset %s: no such file %s" % (spec, path))
    if kind in ("cifar10", "imagefolder") and not os.path.isdir(path):
        raise BadArgs("--dataset %s: no such directory %s" % (spec, path))
    return kind, path


def parse_args(argv):
    """Parse and validate; every mistake is BadArgs or argparse's exit 2."""
    args = build_parser().parse_args(argv)
    if args.model not in TORCHVISION_MODELS and args.model not in BUILTIN_MODELS:
        raise BadArgs("unknown model %r (known: %s)" % (
            args.model, ", ".join(sorted(list(TORCHVISION_MODELS) + list(BUILTIN_MODELS)))))
    for name in ("batch_size", "synthetic_batches"):
        if getattr(args, name) < 1:
            raise BadArgs("--%s must be at least 1" % name.replace("_", "-"))
    for name in ("iterations", "warmup", "workers"):
        if getattr(args, name) < 0:
            raise BadArgs("--%s must not be negative" % name)
    for name in ("threads", "image_size", "num_classes", "eval_batches"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise BadArgs("--%s must be at least 1" % name.replace("_", "-"))
    if args.model == "wrn" and (args.wrn_depth < 10 or (args.wrn_depth - 4) % 6 != 0):
        raise BadArgs("--wrn-depth must be 6n+4 with n >= 1 (10, 16, 22, 28, ...), got %d" % args.wrn_depth)
    if args.wrn_width < 1:
        raise BadArgs("--wrn-width must be at least 1")
    if not (args.loss_scale > 0 and math.isfinite(args.loss_scale)):
        raise BadArgs("--loss-scale must be a positive number")
    if not (args.lr > 0 and math.isfinite(args.lr)):
        raise BadArgs("--lr must be a positive number")
    args.data_kind, args.data_path = parse_dataset(args.dataset)
    return args


def params_of(args):
    """Every option as given: the cell's identity in the stored result."""
    skip = ("data_kind", "data_path")
    return dict((k, v) for k, v in sorted(vars(args).items()) if k not in skip)


# ----------------------------------------------------------------------------- environment

IMPORT_ERRORS = {}  # optional module -> why it could not be imported (the first line)


def _optional_module(name):
    """Import an optional dependency; any failure (not only ImportError) means absent."""
    try:
        return importlib.import_module(name)
    except Exception as e:
        IMPORT_ERRORS[name] = first_line(e)
        return None


def _accepted_kwargs(fn):
    """Names `fn` accepts: how this file probes for keyword arguments newer torch versions added."""
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def _version(module):
    if module is None:
        return None
    return str(getattr(module, "__version__", None) or "present")


def _run_quiet(argv, timeout=10):
    """A helper command's stdout, or None: list arguments, never a shell."""
    try:
        out = subprocess.check_output(argv, stderr=subprocess.DEVNULL, timeout=timeout,
                                      universal_newlines=True)
        return out.strip()
    except Exception:
        return None


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or platform.machine() or None


def _container_hint():
    """Best-effort: which container runtime, if any, this process lives in."""
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    for var in ("container", "SINGULARITY_CONTAINER", "APPTAINER_CONTAINER"):
        if os.environ.get(var):
            return "%s=%s" % (var, os.environ[var])
    return None


def _gpu_selector(index):
    """How nvidia-smi/NVML name torch's device `index`: its UUID when torch knows it, else the
    physical index behind CUDA_VISIBLE_DEVICES (NVML ignores that variable)."""
    try:
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            uuid = str(uuid)
            return "uuid", uuid if uuid.startswith("GPU-") else "GPU-" + uuid
    except Exception:
        pass
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible and index < len(visible):
        v = visible[index]
        return ("index", int(v)) if v.isdigit() else ("uuid", v)
    return "index", index


def _nvml_handle(pynvml, index):
    kind, key = _gpu_selector(index)
    if kind == "index":
        return pynvml.nvmlDeviceGetHandleByIndex(key)
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(key)
    except Exception:  # older pynvml wants bytes
        return pynvml.nvmlDeviceGetHandleByUUID(key.encode())


def gpu_driver_version():
    pynvml = _optional_module("pynvml")
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                v = pynvml.nvmlSystemGetDriverVersion()
                return v.decode() if isinstance(v, bytes) else str(v)
            finally:
                pynvml.nvmlShutdown()
        except Exception:
            pass
    out = _run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def device_memory_used(index):
    """Bytes in use on the GPU as the driver sees it (all processes, context included), or None."""
    pynvml = _optional_module("pynvml")
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                return int(pynvml.nvmlDeviceGetMemoryInfo(_nvml_handle(pynvml, index)).used)
            finally:
                pynvml.nvmlShutdown()
        except Exception:
            pass
    out = _run_quiet(["nvidia-smi", "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"])
    if not out:
        return None
    kind, key = _gpu_selector(index)
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 3:
            continue
        if (kind == "index" and fields[0] == str(key)) or (kind == "uuid" and fields[1] == key):
            try:
                return int(float(fields[2]) * 1024 * 1024)
            except ValueError:
                return None
    return None


def host_peak_rss():
    """Peak resident memory of this process in bytes (Linux reports kB, macOS bytes)."""
    try:
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(rss if sys.platform == "darwin" else rss * 1024)
    except Exception:
        return None


def capture_env(device=None):
    """What this environment turned out to be; travels with every result."""
    tv = _optional_module("torchvision")
    env = {
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "cuda": None, "cudnn": None,
        "torchvision": _version(tv),
        "apex": _version(_optional_module("apex")),
        "numpy": _version(_optional_module("numpy")),
        "device": device.type if device is not None else None,
        "device_name": None, "device_count": 0, "capability": None, "driver": None,
        "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
        "torch_threads": None,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "container": _container_hint(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "env_vars": dict((k, v) for k, v in sorted(os.environ.items())
                         if k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
                         or k.startswith("NCCL_")),
    }
    if torch is None:
        return env
    env["cuda"] = getattr(torch.version, "cuda", None)
    env["torch_threads"] = torch.get_num_threads()
    try:
        env["cudnn"] = torch.backends.cudnn.version()
    except Exception:
        pass
    try:
        if torch.cuda.is_available():
            env["device_count"] = torch.cuda.device_count()
    except Exception:
        pass
    if device is not None and device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        env["device_name"] = torch.cuda.get_device_name(index)
        env["capability"] = "%d.%d" % tuple(torch.cuda.get_device_capability(index))
        env["driver"] = gpu_driver_version()
    elif device is not None:
        env["device_name"] = env["cpu"]
    return env


# ----------------------------------------------------------------------------- distributed

def dist_layout():
    """(rank, world_size, local_rank) from torchrun's variables, else Slurm's when it launched several."""
    env = os.environ
    if env.get("RANK") is not None and env.get("WORLD_SIZE") is not None:
        rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
        local = int(env.get("LOCAL_RANK", env.get("SLURM_LOCALID", rank)))
        return rank, world, local
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1 and env.get("SLURM_PROCID") is not None:
        return int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"]), int(env.get("SLURM_LOCALID", 0))
    return 0, 1, 0


def _slurm_master_addr():
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if nodelist:
        out = _run_quiet(["scontrol", "show", "hostnames", nodelist])
        if out:
            return out.splitlines()[0].strip()
    return os.environ.get("SLURM_LAUNCH_NODE_IPADDR") or "127.0.0.1"


def init_distributed(rank, world, device):
    """env:// rendezvous; NCCL on GPU, gloo on CPU. Slurm runs get MASTER_* defaults."""
    import torch.distributed as dist
    if not dist.is_available():
        raise Unsupported("torch.distributed is not available in this torch build")
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(world))
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = _slurm_master_addr()
    if "MASTER_PORT" not in os.environ:
        job = os.environ.get("SLURM_JOB_ID", "")
        os.environ["MASTER_PORT"] = str(15000 + int(job) % 20000) if job.isdigit() else "29500"
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world)
    return dist


def shutdown_distributed(dist):
    """Destroy the process group while the interpreter is whole.

    The DDP model holds the group and its gloo worker threads through reference cycles;
    if it is still alive when the interpreter finalises, tearing the group down there
    aborts the process ("terminate called without an active exception", exit -6) after
    the result was printed. Collecting first frees it here instead: 4 aborts in 40 two-rank
    CPU runs before, none in 60 after.
    """
    import gc
    gc.collect()
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def gather_hostnames(dist, world, device):
    """Every rank's hostname, in rank order: which nodes the run really spanned.

    Plain all_gather of fixed-size code-point tensors (all_gather_object needs torch >= 1.8).
    """
    width = 64
    name = socket.gethostname()[:width]
    mine = torch.zeros(width, dtype=torch.float64, device=device)
    for i, ch in enumerate(name):
        mine[i] = float(ord(ch))
    every = [torch.zeros(width, dtype=torch.float64, device=device) for _ in range(world)]
    dist.all_gather(every, mine)
    return ["".join(chr(int(c)) for c in t.cpu().tolist() if c > 0) for t in every]


def _reduce_op(dist, name):
    ops = getattr(dist, "ReduceOp", None) or getattr(dist, "reduce_op")  # reduce_op: torch < 1.0
    return getattr(ops, name)


def all_reduce_values(dist, values, op, device):
    """All-reduce a few floats (NCCL needs them on the GPU)."""
    t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=_reduce_op(dist, op))
    return t.cpu().tolist()


# ----------------------------------------------------------------------------- models

_Module = nn.Module if nn is not None else object


class MnistCNN(_Module):
    """PyTorch's examples/mnist network: 2 conv + 2 fc; the fc size follows the input size."""

    def __init__(self, in_channels=1, size=(28, 28), num_classes=10):
        super(MnistCNN, self).__init__()
        self.conv1 = nn.Conv2d(in_channels, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(64 * ((size[0] - 4) // 2) * ((size[1] - 4) // 2), 128)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = x.reshape(x.size(0), -1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return self.fc2(x)


class CifarVGG16(_Module):
    """VGG16 with batch norm for 32x32 inputs: 13 conv layers, one linear classifier."""

    CFG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")

    def __init__(self, in_channels=3, num_classes=10):
        super(CifarVGG16, self).__init__()
        layers = []
        c = in_channels
        for v in self.CFG:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.classifier(x.reshape(x.size(0), -1))


class WideBasic(_Module):
    """Pre-activation wide residual block (Zagoruyko & Komodakis 2016)."""

    def __init__(self, in_planes, planes, stride):
        super(WideBasic, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.shortcut = None
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False)

    def forward(self, x):
        o = F.relu(self.bn1(x))
        shortcut = x if self.shortcut is None else self.shortcut(o)
        y = self.conv1(o)
        y = self.conv2(F.relu(self.bn2(y)))
        return y + shortcut


class WideResNet(_Module):
    """CIFAR WRN-depth-width: three groups of (depth-4)/6 blocks, widths 16k, 32k, 64k."""

    def __init__(self, depth=28, width=10, in_channels=3, num_classes=10):
        super(WideResNet, self).__init__()
        n = (depth - 4) // 6
        widths = [16, 16 * width, 32 * width, 64 * width]
        self.conv1 = nn.Conv2d(in_channels, widths[0], 3, padding=1, bias=False)
        blocks = []
        in_planes = widths[0]
        for group, stride in zip((1, 2, 3), (1, 2, 2)):
            for i in range(n):
                blocks.append(WideBasic(in_planes, widths[group], stride if i == 0 else 1))
                in_planes = widths[group]
        self.blocks = nn.Sequential(*blocks)
        self.bn = nn.BatchNorm2d(in_planes)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.blocks(self.conv1(x))))
        x = self.pool(x)
        return self.fc(x.reshape(x.size(0), -1))


class MLP(_Module):
    """A tiny two-layer perceptron: the fastest thing that still trains, for tests."""

    def __init__(self, in_features, num_classes=10, hidden=256):
        super(MLP, self).__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x.reshape(x.size(0), -1))))


def check_model_available(name):
    """Raise Unsupported when this environment cannot build `name` (torchvision missing or too old)."""
    if name in BUILTIN_MODELS:
        return
    models = _optional_module("torchvision.models")
    if models is None:
        raise Unsupported("model %s needs torchvision, which is not importable here (%s)" % (
            name, IMPORT_ERRORS.get("torchvision.models", "no module")))
    if not callable(getattr(models, name, None)):
        raise Unsupported("model %s is not in this torchvision (%s)" % (
            name, _version(_optional_module("torchvision"))))


def model_defaults(name):
    """(channels, image size, classes) the model naturally takes."""
    return (BUILTIN_MODELS.get(name) or TORCHVISION_MODELS[name])


def build_model(name, args, channels, size, num_classes):
    """The model for inputs of shape (channels, *size) and `num_classes` outputs."""
    if name == "mnist_cnn":
        return MnistCNN(channels, size, num_classes)
    if name == "cifar_vgg16":
        return CifarVGG16(channels, num_classes)
    if name == "wrn":
        return WideResNet(args.wrn_depth, args.wrn_width, channels, num_classes)
    if name == "mlp":
        return MLP(channels * size[0] * size[1], num_classes)
    if channels != 3:
        raise Unsupported("torchvision model %s takes 3-channel input, the data has %d" % (name, channels))
    models = importlib.import_module("torchvision.models")
    return getattr(models, name)(num_classes=num_classes)


def check_input_size(model, name, channels, hw):
    """Raise Unsupported when a torchvision model cannot take this input size (torchvision 0.2's
    resnets end in a fixed 7x7 average pool, so only 224 px fits): one FP32 forward of one image."""
    if name not in TORCHVISION_MODELS or tuple(hw) == (TORCHVISION_MODELS[name][1],) * 2:
        return
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(1, channels, hw[0], hw[1]))
    except (RuntimeError, ValueError) as e:
        raise Unsupported("model %s of torchvision %s cannot take %dx%d input: %s" % (
            name, _version(_optional_module("torchvision")), hw[0], hw[1], first_line(e)))
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------- precision

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
    apex_amp = _optional_module("apex.amp")
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


def autocast_factory(device_type, dtype):
    """A no-argument function returning an autocast context for device_type/dtype, or None."""
    if hasattr(torch, "autocast"):  # torch >= 1.10: one API for every device
        return lambda: torch.autocast(device_type, dtype=dtype)
    if device_type == "cuda" and hasattr(getattr(torch.cuda, "amp", None), "autocast"):
        if "dtype" in _accepted_kwargs(torch.cuda.amp.autocast):
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
        if impl == "native":
            plan.update(autocast=autocast_factory("cuda", torch.float16), loss_scale="dynamic")
        elif impl == "apex":
            plan.update(loss_scale="dynamic")
        else:
            plan.update(model_dtype=torch.float16, input_dtype=torch.float16, bn_fp32=True,
                        loss_scale=float(args.loss_scale))
    elif p == "amp-bf16":
        if args.amp_impl not in ("auto", "native"):
            raise Unsupported("amp-bf16 exists only as native autocast, not %s" % args.amp_impl)
        _bf16_on_device(device)
        factory = autocast_factory(device.type, torch.bfloat16)
        if factory is None:
            raise Unsupported("this torch has no bf16 autocast for %s" % device.type)
        plan.update(mechanism="native", dtype="bfloat16", autocast=factory)
    if args.channels_last and not hasattr(torch, "channels_last"):
        raise Unsupported("this torch has no channels_last memory format")
    if args.compile and not hasattr(torch, "compile"):
        raise Unsupported("this torch has no torch.compile")
    if args.compile and device.type == "cpu" and not _cxx_compiler():
        raise Unsupported("torch.compile on the CPU needs a C++ compiler (inductor), none here (CXX, c++, g++)")
    return plan


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
           "autocast": bool(plan and plan["autocast"] is not None),
           "master_weights": bool(plan and plan["mechanism"] == "manual"),
           "bn_fp32": bool(plan and plan["bn_fp32"])}
    rec.update(extra)
    return rec


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


def make_optimizer(params, args, device, allow_fused):
    """SGD momentum 0.9, fused or foreach on CUDA where this torch has them."""
    params = list(params)
    accepted = _accepted_kwargs(torch.optim.SGD.__init__)
    choices = []
    if device.type == "cuda":
        if allow_fused and "fused" in accepted:
            choices.append(("fused", {"fused": True}))
        if "foreach" in accepted:
            choices.append(("foreach", {"foreach": True}))
    for impl, kwargs in choices:
        try:
            return torch.optim.SGD(params, lr=args.lr, momentum=0.9, **kwargs), impl
        except (RuntimeError, ValueError, TypeError) as e:
            log("SGD %s unavailable here (%s); trying the next" % (impl, e))
    return torch.optim.SGD(params, lr=args.lr, momentum=0.9), "default"


def _zero_grad_fn(optimizer):
    """zero_grad(set_to_none=True) where it exists: frees grads instead of writing zeros."""
    if "set_to_none" in _accepted_kwargs(optimizer.zero_grad):
        return lambda: optimizer.zero_grad(set_to_none=True)
    return optimizer.zero_grad


def make_steps(model, optimizer, plan, master, scaler, apex_amp):
    """The three phases of one training step for this precision: forward(x, y) -> loss,
    backward(loss), update(). Branching happens here, once, not in the hot loop."""
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
            scaler.step(optimizer)
            scaler.update()
            zero_grad()
    else:
        if apex_amp is not None:
            def backward(loss):
                with apex_amp.scale_loss(loss, optimizer) as scaled:
                    scaled.backward()
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
    cast -> optimizer -> apex -> DDP -> compile."""
    extra = {}
    model = convert_model(model, plan, args, device)
    master = scaler = apex_amp = None
    if plan["mechanism"] == "manual":
        master = ManualMasterWeights(model.parameters(), plan["loss_scale"])
        optimizer, impl = make_optimizer(master.master_params, args, device, allow_fused=True)
    else:
        optimizer, impl = make_optimizer(model.parameters(), args, device,
                                         allow_fused=plan["mechanism"] != "apex")
    extra["optimizer"] = "sgd-momentum-0.9-" + impl
    if plan["mechanism"] == "native" and plan["precision"] == "amp":
        scaler = make_grad_scaler()
    if plan["mechanism"] == "apex":
        apex_amp = importlib.import_module("apex.amp")
        if hasattr(apex_amp, "initialize"):
            quiet = {"verbosity": 0} if "verbosity" in _accepted_kwargs(apex_amp.initialize) else {}
            model, optimizer = apex_amp.initialize(model, optimizer, opt_level="O1", loss_scale="dynamic",
                                                   **quiet)
            extra["apex_api"] = "initialize(O1)"
        else:  # 2018 apex: amp.init() returns a handle that owns scale_loss
            apex_amp = apex_amp.init(enabled=True)
            extra["apex_api"] = "init"
    eval_model = model
    rank, world, local = dist_info
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        kwargs = {}
        if device.type == "cuda":
            kwargs["device_ids"] = [device.index]
            kwargs["output_device"] = device.index
        if "gradient_as_bucket_view" in _accepted_kwargs(DDP.__init__):
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
        try:
            model = torch.compile(model)
        except RuntimeError as e:  # e.g. Dynamo refusing this Python version
            raise Unsupported("torch.compile: %s" % str(e).splitlines()[0])
    steps = make_steps(model, optimizer, plan, master, scaler, apex_amp)
    return model, eval_model, steps, extra


# ----------------------------------------------------------------------------- data

class _TensorPairs(object):
    """(x, y) pairs from two tensors: TensorDataset without its version differences."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return int(self.x.size(0))

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def _require_numpy(kind):
    np = _optional_module("numpy")
    if np is None:
        raise Unsupported("dataset %s needs numpy, which is not importable here" % kind)
    return np


def _to_nchw(np, x, where):
    """N,C,H,W or N,H,W or N,H,W,C -> N,C,H,W (a channel axis is 1, 3 or 4 wide)."""
    if x.ndim == 3:
        return x[:, None, :, :]
    if x.ndim != 4:
        raise BadArgs("%s: images must be N,C,H,W or N,H,W[,C], got shape %s" % (where, tuple(x.shape)))
    if x.shape[1] not in (1, 3, 4) and x.shape[3] in (1, 3, 4):
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    return x


def _images_tensor(np, x, where):
    """Keep uint8 as uint8 (scaled to [0,1] on the device, 4x less copying); anything else float32."""
    x = _to_nchw(np, np.asarray(x), where)
    if x.dtype == np.uint8:
        return torch.from_numpy(np.ascontiguousarray(x))
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))


def _labels_tensor(np, y, n, where):
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] > 1:  # one-hot
        y = y.argmax(axis=1)
    y = y.reshape(-1)
    if y.shape[0] != n:
        raise BadArgs("%s: %d labels for %d images" % (where, y.shape[0], n))
    if y.size and (y.min() < 0 or np.any(y != np.floor(y))):
        raise BadArgs("%s: labels must be non-negative integers" % where)
    return torch.from_numpy(y.astype(np.int64))


def load_npz(path):
    np = _require_numpy("npz")
    try:
        data = np.load(path)
        arrays = dict((k, data[k]) for k in ("x_train", "y_train", "x_test", "y_test"))
    except KeyError as e:
        raise BadArgs("npz:%s lacks array %s (needs x_train, y_train, x_test, y_test)" % (path, e))
    except Exception as e:
        raise BadArgs("npz:%s cannot be read: %s" % (path, str(e).splitlines()[0] if str(e) else type(e).__name__))
    out = []
    for split in ("train", "test"):
        where = "npz:%s x_%s" % (path, split)
        x = _images_tensor(np, arrays["x_" + split], where)
        out.append((x, _labels_tensor(np, arrays["y_" + split], x.size(0), where)))
    return out


def load_cifar10(path):
    """The python-pickle CIFAR-10 batches (data_batch_1..5, test_batch), in DIR or DIR/cifar-10-batches-py."""
    import pickle
    np = _require_numpy("cifar10")
    if os.path.isdir(os.path.join(path, "cifar-10-batches-py")):
        path = os.path.join(path, "cifar-10-batches-py")
    splits = {"train": ["data_batch_%d" % i for i in range(1, 6)], "test": ["test_batch"]}
    out = []
    for split in ("train", "test"):
        xs, ys = [], []
        for name in splits[split]:
            fname = os.path.join(path, name)
            if not os.path.isfile(fname):
                raise BadArgs("cifar10:%s: missing %s" % (path, name))
            try:
                with open(fname, "rb") as f:
                    batch = pickle.load(f, encoding="bytes")
                xs.append(np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
                ys.append(np.asarray(batch[b"labels"], dtype=np.int64))
            except Exception as e:
                raise BadArgs("cifar10:%s: cannot read %s: %s" % (path, name, e))
        x = torch.from_numpy(np.ascontiguousarray(np.concatenate(xs)))
        out.append((x, torch.from_numpy(np.concatenate(ys))))
    return out


def load_imagefolder(path, size):
    """torchvision ImageFolder: DIR/train + DIR/val, or DIR itself for both."""
    datasets = _optional_module("torchvision.datasets")
    T = _optional_module("torchvision.transforms")
    if datasets is None or T is None:
        raise Unsupported("dataset imagefolder needs torchvision, which is not importable here")
    train_dir, val_dir = os.path.join(path, "train"), os.path.join(path, "val")
    if not (os.path.isdir(train_dir) and os.path.isdir(val_dir)):
        train_dir = val_dir = path
    norm = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train_tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), norm])
    val_tf = T.Compose([T.Resize(int(round(size * 256.0 / 224))), T.CenterCrop(size), T.ToTensor(), norm])
    try:
        train = datasets.ImageFolder(train_dir, transform=train_tf)
        test = datasets.ImageFolder(val_dir, transform=val_tf)
    except (RuntimeError, FileNotFoundError, OSError) as e:
        raise BadArgs("imagefolder:%s: %s" % (path, str(e).splitlines()[0]))
    return train, test, len(train.classes)


class SyntheticSource(object):
    """A fixed pool of random batches made once on the device: no loader, no copies in the loop."""

    def __init__(self, pool):
        self.pool = pool
        self.i = 0

    def next(self):
        batch = self.pool[self.i]
        self.i = (self.i + 1) % len(self.pool)
        return batch


class LoaderSource(object):
    """Batches from a DataLoader, copied to the device; a new epoch starts when one runs out."""

    def __init__(self, loader, sampler, prepare, device):
        self.loader, self.sampler, self.prepare, self.device = loader, sampler, prepare, device
        self.epoch = 0
        self.it = iter(loader)

    def next(self):
        try:
            x, y = next(self.it)
        except StopIteration:
            self.epoch += 1
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            x, y = next(self.it)
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        return self.prepare(x), y


def make_prepare(plan, args):
    """Device-side input conversion: uint8 -> [0,1], the model's dtype, the memory format."""
    dtype = plan["input_dtype"]
    channels_last = args.channels_last

    def prepare(x):
        if x.dtype == torch.uint8:
            x = x.to(dtype or torch.float32).div_(255)
        elif dtype is not None and x.dtype != dtype:
            x = x.to(dtype)
        if channels_last and x.dim() == 4:
            x = x.contiguous(memory_format=torch.channels_last)
        return x
    return prepare


def _loader_kwargs(args, device, generator_seed, shuffle):
    kwargs = {"num_workers": args.workers, "pin_memory": device.type == "cuda"}
    accepted = _accepted_kwargs(torch.utils.data.DataLoader.__init__)
    if shuffle and generator_seed is not None and "generator" in accepted:
        g = torch.Generator()
        g.manual_seed(generator_seed)
        kwargs["generator"] = g
    if args.workers > 0 and "persistent_workers" in accepted:
        kwargs["persistent_workers"] = True  # no worker re-spawn at each new epoch
    return kwargs


def make_train_source(train_ds, args, device, prepare, dist_info):
    """A shuffled (seeded), drop_last DataLoader over this rank's shard."""
    from torch.utils.data import DataLoader
    rank, world, _ = dist_info
    sampler = None
    if world > 1:
        from torch.utils.data.distributed import DistributedSampler
        skw = {"num_replicas": world, "rank": rank}
        accepted = _accepted_kwargs(DistributedSampler.__init__)
        for key, value in (("shuffle", True), ("seed", args.seed)):  # shuffles by default; seed: 1.6+
            if key in accepted:
                skw[key] = value
        sampler = DistributedSampler(train_ds, **skw)
    per_rank = len(train_ds) // world
    if per_rank < args.batch_size:
        raise BadArgs("dataset %s has %d training samples per process, fewer than --batch-size %d"
                      % (args.dataset, per_rank, args.batch_size))
    loader = DataLoader(train_ds, batch_size=args.batch_size, shuffle=sampler is None, sampler=sampler,
                        drop_last=True, **_loader_kwargs(args, device, args.seed, sampler is None))
    return LoaderSource(loader, sampler, prepare, device)


def load_data(args, device, plan, model_shape, dist_info):
    """Training source, test set and the shape the model must take: (source, test_ds, channels,
    (H, W), num_classes, info)."""
    kind, path = args.data_kind, args.data_path
    channels, default_size, default_classes = model_shape
    prepare = make_prepare(plan, args)
    if kind == "synthetic":
        size = args.image_size or default_size
        classes = args.num_classes or default_classes
        pool = []
        for _ in range(args.synthetic_batches):
            x = torch.randn(args.batch_size, channels, size, size, device=device)
            y = torch.randint(0, classes, (args.batch_size,), device=device, dtype=torch.long)
            pool.append((prepare(x), y))
        return SyntheticSource(pool), None, channels, (size, size), classes, {"train_samples": None,
                                                                             "test_samples": None}
    if kind == "imagefolder":
        size = args.image_size or default_size
        train_ds, test_ds, classes = load_imagefolder(path, size)
        channels_data, hw = 3, (size, size)
    else:
        (xtr, ytr), (xte, yte) = load_npz(path) if kind == "npz" else load_cifar10(path)
        if xtr.shape[1:] != xte.shape[1:]:
            raise BadArgs("%s: train images %s and test images %s differ in shape"
                          % (args.dataset, tuple(xtr.shape[1:]), tuple(xte.shape[1:])))
        channels_data, hw = int(xtr.size(1)), (int(xtr.size(2)), int(xtr.size(3)))
        if args.image_size is not None and (args.image_size, args.image_size) != hw:
            raise BadArgs("%s has %dx%d images but --image-size is %d" % (args.dataset, hw[0], hw[1],
                                                                          args.image_size))
        classes = int(max(int(ytr.max()) if ytr.numel() else 0, int(yte.max()) if yte.numel() else 0)) + 1
        train_ds, test_ds = _TensorPairs(xtr, ytr), _TensorPairs(xte, yte)
    if args.num_classes is not None:
        if args.num_classes < classes:
            raise BadArgs("%s has labels up to %d but --num-classes is %d" % (args.dataset, classes - 1,
                                                                             args.num_classes))
        classes = args.num_classes
    source = make_train_source(train_ds, args, device, prepare, dist_info)
    info = {"train_samples": len(train_ds), "test_samples": len(test_ds)}
    return source, test_ds, channels_data, hw, classes, info


# ----------------------------------------------------------------------------- timing and training

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


def run_warmup(n, source, steps):
    """Discarded iterations; returns the first loss (a sync, outside the window) or None."""
    forward, backward, update = steps
    first = None
    for i in range(n):
        x, y = source.next()
        loss = forward(x, y)
        backward(loss)
        update()
        if i == 0:
            first = float(loss.detach().float().item())
    return first


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
    sync()
    if dist is not None:
        dist.barrier()  # every rank starts its window together
    reset_peak_memory(device)
    sync()
    t0 = perf()
    if cuda:
        events[0].record()
    prev = t0
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
    sync()
    t1 = perf()
    if cuda:
        iter_times = [events[i].elapsed_time(events[i + 1]) / 1000.0 for i in range(n)]
    else:
        iter_times = host_times
    loss_values = torch.stack(losses).float().cpu().tolist() if losses else []
    out = {"window_s": t1 - t0, "iter_times": iter_times, "data_wait_s": data_wait,
           "losses": loss_values}
    if breakdown:
        out["breakdown"] = {"forward_s": phases[0], "backward_s": phases[1], "optimizer_s": phases[2],
                            "synchronized_per_phase": True}
    return out


def evaluate(predict, model, test_ds, args, device, prepare, dist_info, dist):
    """Top-1 accuracy on the test split, sharded over ranks and summed."""
    from torch.utils.data import DataLoader
    rank, world, _ = dist_info
    ds = _Shard(test_ds, rank, world) if world > 1 else test_ds
    loader = DataLoader(ds, batch_size=args.batch_size, shuffle=False, drop_last=False,
                        **_loader_kwargs(args, device, None, False))
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


class _Shard(object):
    """Every world-th sample starting at rank: an exact, non-padded split of the test set."""

    def __init__(self, ds, rank, world):
        self.ds = ds
        self.indices = list(range(rank, len(ds), world))

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        return self.ds[self.indices[i]]


# ----------------------------------------------------------------------------- results and main

def sanitize(value):
    """JSON-safe copy: NaN and infinities become null (json.dumps runs with allow_nan=False)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return dict((str(k), sanitize(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [sanitize(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def empty_metrics(world):
    return {"throughput": None, "window_s": None, "images": None, "iter_times": [],
            "data_wait_s": None, "loss_start": None, "loss_end": None, "accuracy": None,
            "peak_mem_allocated": None, "peak_mem_reserved": None, "device_mem_used": None,
            "host_peak_rss": None, "breakdown": None, "world_size": world}


class ResultChannel(object):
    """Keeps the real stdout for the one result line; everything else written to stdout, C-level
    prints (NCCL, apex) included, is sent to stderr while the benchmark runs."""

    def __init__(self):
        self.fd = None
        self.orig = sys.stdout
        try:
            sys.stdout.flush()
            self.fd = os.dup(1)
            os.dup2(2, 1)
        except (OSError, AttributeError, ValueError):
            self.fd = None
        sys.stdout = sys.stderr

    def emit(self, line):
        data = (line + "\n").encode("utf-8")
        if self.fd is None:
            self.orig.write(line + "\n")
            self.orig.flush()
            return
        while data:
            data = data[os.write(self.fd, data):]

    def close(self):
        sys.stderr.flush()
        sys.stdout = self.orig
        if self.fd is not None:
            try:
                os.dup2(self.fd, 1)
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def is_oom(exc):
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch is not None else None
    if oom_type is not None and isinstance(exc, oom_type):
        return True
    text = str(exc)
    return isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text))


def is_dtype_gap(exc):
    """An operator this torch lacks for the dtype: the combination is unsupported, not broken."""
    text = str(exc)
    return isinstance(exc, (RuntimeError, NotImplementedError)) and "not implemented for" in text and (
        "Half" in text or "BFloat16" in text)


def first_line(exc):
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return ("%s: %s" % (type(exc).__name__, lines[0].strip()))[:500] if lines else type(exc).__name__


def resolve_device(requested, local_rank):
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
    random.seed(seed)
    torch.manual_seed(seed)
    np = _optional_module("numpy")
    if np is not None:
        np.random.seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def benchmark(args, state):
    """Everything between parsed arguments and the result: fills state['result'] as it learns."""
    result = state["result"]
    metrics = result["metrics"]
    rank, world, local = state["dist_info"]
    device = resolve_device(args.device, local)
    state["device"] = device
    result["env"] = capture_env(device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
        result["env"]["torch_threads"] = torch.get_num_threads()
    seed_everything(args.seed)
    check_model_available(args.model)
    plan = plan_precision(args, device)
    state["plan"] = plan
    flags = apply_backend_flags(plan, args, device)
    state["flags"] = flags
    result["precision"] = precision_record(plan, flags, args, {})
    dist = None
    if world > 1:
        dist = init_distributed(rank, world, device)
        state["dist"] = dist
        result["env"]["hostnames"] = gather_hostnames(dist, world, device)

    source, test_ds, channels, hw, classes, info = load_data(
        args, device, plan, model_defaults(args.model), state["dist_info"])
    if min(hw) < MIN_IMAGE_SIZE.get(args.model, 32):
        raise BadArgs("model %s needs images of at least %dx%d, got %dx%d" % (
            args.model, MIN_IMAGE_SIZE.get(args.model, 32), MIN_IMAGE_SIZE.get(args.model, 32), hw[0], hw[1]))
    model = build_model(args.model, args, channels, hw, classes)
    check_input_size(model, args.model, channels, hw)
    result["workload"] = dict(info, input_shape=[channels, hw[0], hw[1]], num_classes=classes,
                              parameters=int(sum(p.numel() for p in model.parameters())),
                              dataset_kind=args.data_kind)
    model.train()
    model, eval_model, steps, extra = setup_training(model, plan, args, device, state["dist_info"])
    result["precision"] = precision_record(plan, flags, args, extra)

    log("%s %s batch %d on %s%s: %d warm-up + %d measured iterations" % (
        args.model, args.precision, args.batch_size, device, " x%d ranks" % world if world > 1 else "",
        args.warmup, args.iterations))
    if args.compile and args.warmup == 0:
        log("--compile with --warmup 0: compilation time falls inside the measured window")
    loss_start = run_warmup(args.warmup, source, steps)
    window = run_window(args.iterations, source, steps, device, args.breakdown, dist)
    memory = memory_metrics(device)
    if world > 1:  # the largest footprint of any rank (-1 stands for unknown)
        keys = ("peak_mem_allocated", "peak_mem_reserved", "device_mem_used")
        peaks = all_reduce_values(dist, [-1 if memory[k] is None else memory[k] for k in keys], "MAX", device)
        memory.update((k, None if v < 0 else int(v)) for k, v in zip(keys, peaks))
    metrics.update(memory)
    losses = window["losses"]
    if loss_start is None and losses:
        loss_start = losses[0]
    images = args.iterations * args.batch_size
    window_s = window["window_s"]
    data_wait = window["data_wait_s"]
    if world > 1:
        images, = all_reduce_values(dist, [images], "SUM", device)
        window_s, data_wait = all_reduce_values(dist, [window_s, data_wait], "MAX", device)
        images = int(images)
    tail = losses[-LOSS_END_WINDOW:]
    metrics.update({
        "throughput": (images / window_s) if args.iterations > 0 and window_s > 0 else None,
        "window_s": window_s, "images": images, "iter_times": window["iter_times"],
        "data_wait_s": data_wait,
        "loss_start": loss_start, "loss_end": (sum(tail) / len(tail)) if tail else None,
        "losses": losses, "breakdown": window.get("breakdown"),
    })
    if test_ds is not None:
        prepare = make_prepare(plan, args)
        metrics["accuracy"] = evaluate(make_predict(eval_model, plan), eval_model, test_ds, args, device,
                                       prepare, state["dist_info"], dist)
    if args.iterations > 0:
        log("%.1f img/s over %.3f s, loss %s -> %s, accuracy %s" % (
            metrics["throughput"] or 0.0, window_s, loss_start, metrics["loss_end"], metrics["accuracy"]))


def new_result(args, world):
    return {"schema": SCHEMA, "status": "ok", "reason": None, "params": params_of(args),
            "metrics": empty_metrics(world), "precision": None, "env": None, "workload": None}


def main(argv=None):
    """Run one benchmark; returns the exit status (internals.md)."""
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except BadArgs as e:
        sys.stderr.write("bench.py: error: %s\n" % e)
        return EXIT_BAD_ARGS
    rank, world, local = dist_layout()
    channel = ResultChannel()
    state = {"result": new_result(args, world), "device": None, "dist_info": (rank, world, local),
             "dist": None, "plan": None, "flags": {}}
    result = state["result"]
    code = EXIT_OK
    try:
        if torch is None:
            raise Unsupported("torch is not importable here: %s" % TORCH_IMPORT_ERROR)
        benchmark(args, state)
    except BadArgs as e:
        sys.stderr.write("bench.py: error: %s\n" % e)
        code = EXIT_BAD_ARGS
    except Unsupported as e:
        result.update(status="unsupported", reason=str(e))
        code = EXIT_UNSUPPORTED
    except Exception as e:  # every failure becomes a result with a status
        if torch is not None and is_oom(e):
            result.update(status="oom", reason=first_line(e))
            result["metrics"].update(memory_metrics(state["device"]))
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
            shutdown_distributed(state["dist"])
    try:
        if code != EXIT_BAD_ARGS and rank == 0:
            if result["env"] is None:
                result["env"] = capture_env(state["device"])
            if result["precision"] is None:
                result["precision"] = precision_record(state["plan"], state["flags"], args, {})
            channel.emit(RESULT_PREFIX + json.dumps(sanitize(result), allow_nan=False))
    finally:
        channel.close()
    return code


if __name__ == "__main__":
    _code = main()
    # The result is out: skip the interpreter's teardown. Debian's PyTorch 1.7 (bullseye) dies in a
    # C++ destructor at exit ("terminate called without an active exception", SIGSEGV) after a
    # run that succeeded, which would turn an ok result into a crash.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_code)
