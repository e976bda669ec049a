"""Environment capture: what this environment turned out to be (Python, torch, CUDA, cuDNN, GPU,
driver, CPU, host, container, Slurm job); it travels with every result."""

import math
import os
import platform
import socket
import sys

from .compat import optional_module, run_quiet, torch, version_of

# What an environment is made of (packages, build facts, the steering variables): software.py.
from .software import add_software, system_facts  # noqa: F401  (add_software: main.py calls envinfo.add_software)


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or platform.machine() or None


# The /proc/cpuinfo flags that say how a CPU does bf16 and wide math (x86 "flags", aarch64 "Features").
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16", "avx_vnni",
             "bf16", "sve", "asimd")
BF16_FLAGS = (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("bf16", "Arm BF16"))


def cpu_flags():
    """The first processor's flags in /proc/cpuinfo (a set; empty where there is no such file)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key = line.split(":", 1)[0].strip().lower()
                if key in ("flags", "features"):
                    return set(line.split(":", 1)[1].split())
    except (IOError, OSError):
        pass
    return set()


def cpus_granted():
    """The processors this process may run on (its affinity mask: taskset, a cpuset, Slurm), or None."""
    get = getattr(os, "sched_getaffinity", None)
    if get is None:
        return None
    try:
        return len(get(0))
    except OSError:
        return None


def cpu_quota():
    """The CPU time a cgroup grants this process, in processors (docker --cpus, a Kubernetes limit), or None
    when unlimited or unknown: a quota is not visible in the affinity mask."""
    for path, period_path in (("/sys/fs/cgroup/cpu.max", None),
                              ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
                              ("/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
                               "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us")):
        try:
            with open(path) as f:
                fields = f.read().split()
            if period_path is not None:
                with open(period_path) as f:
                    fields = fields[:1] + f.read().split()[:1]
        except (IOError, OSError):
            continue
        if len(fields) < 2 or fields[0] in ("max", "-1"):
            return None
        try:
            quota, period = float(fields[0]), float(fields[1])
        except ValueError:
            return None
        return quota / period if quota > 0 and period > 0 else None
    return None


def threads_granted():
    """How many threads this process can keep busy at once: its affinity mask, lowered to a cgroup's CPU quota
    (rounded up); None when neither is known."""
    granted = cpus_granted()
    quota = cpu_quota()
    if quota is not None:
        whole = max(1, int(math.ceil(quota - 1e-9)))
        granted = whole if granted is None else min(granted, whole)
    return granted


def load_average():
    """The machine's 1-minute load average (processes running or waiting for a processor), or None."""
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):
        return None


def torch_cpu_capability():
    """The vector ISA PyTorch's CPU kernels dispatched to ("AVX2", "AVX512", "DEFAULT", ...): PyTorch >= 2.0 says
    so (torch.backends.cpu.get_cpu_capability); older ones only in their build configuration, or not at all."""
    if torch is None:
        return None
    get = getattr(getattr(getattr(torch, "backends", None), "cpu", None), "get_cpu_capability", None)
    if get is not None:
        try:
            return str(get())
        except Exception:
            pass
    try:
        for line in torch.__config__.show().splitlines():
            if "CPU capability usage:" in line:
                return line.split(":", 1)[1].strip()
    except Exception:
        pass
    return None


def onednn_bf16():
    """Whether oneDNN (mkldnn) says this CPU runs bf16 natively, where this torch can ask (None: cannot)."""
    if torch is None:
        return None
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return None


def cpu_features():
    """env.cpu_features: what the CPU and PyTorch's dispatch offer for each precision's math (the CPU side of
    "what each precision ran on"; a GPU's is env.device_features)."""
    flags = cpu_flags()
    return {"flags": sorted(f for f in CPU_FLAGS if f in flags), "flags_read": bool(flags),
            "torch_capability": torch_cpu_capability(), "onednn_bf16": onednn_bf16(),
            "onednn_max_isa": os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or None,
            "cpus_granted": cpus_granted(), "cpu_quota": cpu_quota(), "cpu_count": os.cpu_count()}


def cpu_math(dtype, feats):
    """precision.cpu_math: whether the math a precision asked for is native on this CPU. `dtype` is the
    precision's ("float32", "bfloat16", ...). {"native": True/False/None, "unit": words, "why": words or None}."""
    dispatch = feats.get("torch_capability")
    on = (" on %s" % dispatch) if dispatch else ""
    if dtype in ("float32", "tf32", None):
        return {"native": True, "unit": "fp32" + on, "why": None}
    if dtype != "bfloat16":
        return {"native": False, "unit": "%s emulated%s" % (dtype, on), "why": "this CPU has no %s arithmetic" % dtype}
    flags = set(feats.get("flags") or ())
    hardware = [words for flag, words in BF16_FLAGS if flag in flags]
    if not feats.get("flags_read"):
        return {"native": None, "unit": "bf16" + on, "why": "the CPU's flags could not be read"}
    if not hardware:
        return {"native": False, "unit": "bf16 emulated" + on,
                "why": "no AVX512-BF16 or AMX-BF16 on this CPU: bf16 is converted to fp32 for the math"}
    x86 = "avx2" in flags or "avx512f" in flags
    limit = feats.get("onednn_max_isa")
    if x86 and limit and not any(word in limit.upper() for word in ("BF16", "AMX", "AVX10", "ALL")):
        return {"native": False, "unit": "bf16 emulated" + on,
                "why": "this CPU has %s, but oneDNN is limited to %s (DNNL_MAX_CPU_ISA)" % (hardware[0], limit)}
    if feats.get("onednn_bf16") is False:
        return {"native": False, "unit": "bf16 emulated" + on,
                "why": "this CPU has %s, but oneDNN does not use it (DNNL_MAX_CPU_ISA?)" % hardware[0]}
    # The convolutions and matrix products run in oneDNN, which picks its instructions itself: PyTorch's own
    # dispatch (ATEN_CPU_CAPABILITY, a distribution's build) covers only the element-wise kernels. Debian's
    # PyTorch 1.13 dispatches to AVX2 and trains bf16 4x faster than fp32 on an AMX CPU.
    own = dispatch and x86 and "AVX512" not in dispatch.upper() and "AMX" not in dispatch.upper()
    if feats.get("onednn_bf16") is None and own:
        return {"native": None, "unit": "bf16" + on,
                "why": "this CPU has %s; PyTorch's own kernels dispatch to %s and this torch cannot say whether "
                       "oneDNN uses it" % (hardware[0], dispatch)}
    return {"native": True, "unit": "bf16 on %s" % hardware[0] + (" (element-wise on %s)" % dispatch if own else ""),
            "why": None}


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
    pynvml = optional_module("pynvml")
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
    out = run_quiet(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None


def device_memory_used(index):
    """Bytes in use on the GPU as the driver sees it (all processes, context included), or None."""
    pynvml = optional_module("pynvml")
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                return int(pynvml.nvmlDeviceGetMemoryInfo(_nvml_handle(pynvml, index)).used)
            finally:
                pynvml.nvmlShutdown()
        except Exception:
            pass
    out = run_quiet(["nvidia-smi", "--query-gpu=index,uuid,memory.used", "--format=csv,noheader,nounits"])
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
    tv = optional_module("torchvision")
    env = {
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None),
        "cuda": None, "cudnn": None,
        "torchvision": version_of(tv),
        "apex": version_of(optional_module("apex")),
        "numpy": version_of(optional_module("numpy")),
        "device": device.type if device is not None else None,
        "device_name": None, "device_count": 0, "capability": None, "driver": None,
        "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
        "torch_threads": None, "cpu_features": cpu_features(),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "container": _container_hint(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        # os, libc, nccl: system_facts below
        "env_vars": dict((k, v) for k, v in sorted(os.environ.items())
                         if k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY",
                                  "OMP_PROC_BIND", "OMP_PLACES", "GOMP_SPINCOUNT", "KMP_BLOCKTIME",
                                  "ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA")
                         or k.startswith("NCCL_")),
    }
    env.update(system_facts())
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
