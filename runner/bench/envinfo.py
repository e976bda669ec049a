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
        # os, libc, nccl: system_facts below
        "env_vars": dict((k, v) for k, v in sorted(os.environ.items())
                         if k in ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
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


# What an environment is made of, for `matrix diff` and `matrix bisect` (docs/internals.md, "Captures").
# Two parts: small facts that go into every result's env (`system_facts`), and the large, rarely changing
# lists (`software_capture`: Python distributions, system packages, the variables that steer the libraries,
# torch's build configuration), taken after the measured window and kept once per distinct content by the
# store. Both read files and directory listings only: no pip, no pkg_resources, no subprocess, so they work
# from Python 3.6 and cost milliseconds.

_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "NCCL_", "CUDA_", "CUDNN_", "NVIDIA_", "TORCH_", "PYTORCH_",
                 "DNNL_", "ONEDNN_", "OPENBLAS_", "ATEN_", "NVTE_", "CUBLAS_", "TF32_", "XLA_", "UCX_", "FI_",
                 "MALLOC_", "LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "PYTHONOPTIMIZE", "PYTHONPATH",
                 "PYTHONHOME", "PYTHONNOUSERSITE")
_ENV_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "API_KEY", "AUTH")


def relevant_env_vars():
    """The variables that steer PyTorch and the libraries under it (threads, oneDNN/MKL/BLAS, NCCL, CUDA,
    allocators) and the *_VERSION variables images set (NGC: CUDA_VERSION, CUDNN_VERSION, NCCL_VERSION,
    NVIDIA_PYTORCH_VERSION); names that look like secrets are left out."""
    found = {}
    for name, value in os.environ.items():
        upper = name.upper()
        if any(word in upper for word in _ENV_SECRET_WORDS):
            continue
        if upper.startswith(_ENV_PREFIXES) or upper.endswith("_VERSION"):
            found[name] = value
    return dict(sorted(found.items()))


def os_release():
    """PRETTY_NAME of /etc/os-release ('Debian GNU/Linux 12 (bookworm)'), else the platform."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as f:
                for line in f:
                    if line.startswith("PRETTY_NAME="):
                        return line.split("=", 1)[1].strip().strip("\"'") or None
        except (IOError, OSError):
            continue
    return None


def libc_version():
    """'glibc 2.36' from the running C library (confstr: no binary is read)."""
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") or None
    except (AttributeError, ValueError, OSError):
        return None


def nccl_version():
    """NCCL's version as '2.18.1' when this torch was built with it (an int 2708 in old releases, a tuple in
    new ones), else None."""
    if torch is None:
        return None
    try:
        nccl = getattr(torch.cuda, "nccl", None)
        v = nccl.version() if nccl is not None else None
    except Exception:
        return None
    if isinstance(v, tuple):
        return ".".join(str(p) for p in v)
    if isinstance(v, int) and v > 0:
        # 2708 -> 2.7.8 (NCCL < 2.9 packed major*1000 + minor*100 + patch); 21803 -> 2.18.3
        if v >= 10000:
            return "%d.%d.%d" % (v // 10000, (v % 10000) // 100, v % 100)
        return "%d.%d.%d" % (v // 1000, (v % 1000) // 100, v % 100)
    return None


def system_facts():
    """Small facts every result carries beside Python and torch: the OS release, the C library, NCCL."""
    return {"os": os_release(), "libc": libc_version(), "nccl": nccl_version()}


def _normal_name(name):
    """A distribution name as pip compares them (PEP 503): lower case, runs of - _ . as one -."""
    out, dash = [], False
    for ch in name.lower():
        if ch in "-_.":
            if not dash:
                out.append("-")
            dash = True
        else:
            out.append(ch)
            dash = False
    return "".join(out)


def _metadata_version(path):
    """The Version: field of a dist-info's METADATA or an egg-info's PKG-INFO (a file or a folder)."""
    for candidate in (os.path.join(path, "METADATA"), os.path.join(path, "PKG-INFO"), path):
        if not os.path.isfile(candidate):
            continue
        try:
            with open(candidate, errors="replace") as f:
                for i, line in enumerate(f):
                    if line.startswith("Version:"):
                        return line.split(":", 1)[1].strip()
                    if i > 50 or not line.strip():
                        break
        except (IOError, OSError):
            pass
    return None


def python_distributions():
    """{name: version} of the installed Python distributions on sys.path, as `pip freeze` sees them: from the
    names of the *.dist-info and *.egg-info entries (pip, setuptools, Debian's python3-* packages), the first
    on sys.path winning as import does."""
    found = {}
    for folder in sys.path:
        if not folder or not os.path.isdir(folder):
            continue
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        for entry in names:
            if entry.endswith(".dist-info"):
                stem = entry[:-len(".dist-info")]
            elif entry.endswith(".egg-info"):
                stem = entry[:-len(".egg-info")]
            else:
                continue
            name, _, version = stem.partition("-")
            if version.count("-") and version.rsplit("-", 1)[1].startswith("py"):
                version = version.rsplit("-", 1)[0]  # foo-1.0-py3.9.egg-info
            if not version:
                version = _metadata_version(os.path.join(folder, entry)) or "?"
            key = _normal_name(name)
            if key and key not in found:
                found[key] = version
    return dict(sorted(found.items()))


def dpkg_packages(status_path="/var/lib/dpkg/status"):
    """{package: version} of the Debian/Ubuntu packages installed (the image's equivalent of pip freeze),
    read from dpkg's status file; None where there is no dpkg."""
    if not os.path.isfile(status_path):
        return None
    found = {}
    try:
        with open(status_path, errors="replace") as f:
            name = version = arch = None
            installed = False
            for line in f:
                if line == "\n":
                    if name and version and installed:
                        found[name if arch in (None, "all", "amd64", "arm64") else name + ":" + arch] = version
                    name = version = arch = None
                    installed = False
                elif line.startswith("Package: "):
                    name = line[9:].strip()
                elif line.startswith("Version: "):
                    version = line[9:].strip()
                elif line.startswith("Architecture: "):
                    arch = line[14:].strip()
                elif line.startswith("Status: "):
                    installed = line.rstrip().endswith(" installed")
            if name and version and installed:
                found[name] = version
    except (IOError, OSError):
        return None
    return dict(sorted(found.items()))


def conda_packages():
    """{package: version} from a conda environment's conda-meta (name-version-build.json), else None."""
    meta = os.path.join(sys.prefix, "conda-meta")
    if not os.path.isdir(meta):
        return None
    found = {}
    try:
        for entry in os.listdir(meta):
            if entry.endswith(".json"):
                parts = entry[:-5].rsplit("-", 2)
                if len(parts) == 3:
                    found[parts[0]] = parts[1]
    except OSError:
        return None
    return dict(sorted(found.items()))


def torch_build_config():
    """torch.__config__.show(): the compiler, oneDNN (MKL-DNN), BLAS and CUDA it was built with (PyTorch 1.1+)."""
    try:
        return torch.__config__.show().strip() or None
    except Exception:
        return None


def software_capture():
    """The large part of what an environment is made of. Taken once the measured window is over (main), so
    it costs the measurement nothing; the store keeps one copy per distinct content (a `captures` row) and
    each result refers to it."""
    capture = {"python_packages": python_distributions(), "env_vars": relevant_env_vars()}
    for key, read in (("dpkg", dpkg_packages), ("conda", conda_packages), ("torch_config", torch_build_config)):
        try:
            value = read()
        except Exception:
            value = None
        if value:
            capture[key] = value
    return capture


def add_software(env):
    """Put the software capture into a result's env (key `software`); never fails the repeat."""
    if env is None:
        return
    try:
        env["software"] = software_capture()
    except Exception as e:
        env["software"] = {"error": "%s: %s" % (type(e).__name__, e)}
