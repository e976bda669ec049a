"""What an environment is made of, for `matrix diff` and `matrix bisect`: the facts every result carries (OS,
libc, NCCL) and the large capture (distributions, system packages, steering variables, torch's build)."""

import os
import sys

from .compat import torch

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
