"""Environment capture: what this environment turned out to be (Python, torch, CUDA, cuDNN, GPU,
driver, CPU, host, container, Slurm job); it travels with every result."""

import os
import platform
import socket
import sys

from .compat import optional_module, run_quiet, torch, version_of


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
