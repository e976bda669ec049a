"""What this Python and PyTorch offer: torch itself (or why not), optional modules, keyword probes.

Features are probed, never inferred from version numbers: the same code runs on Python 3.6 with
PyTorch 1.0 (2018) and on today's releases.
"""

import importlib
import inspect
import subprocess
import sys

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

IMPORT_ERRORS = {}  # optional module -> why it could not be imported (the first line)


def log(msg):
    """Progress goes to stderr: stdout carries only the result line."""
    sys.stderr.write("[bench] %s\n" % msg)
    sys.stderr.flush()


def first_line(exc):
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return ("%s: %s" % (type(exc).__name__, lines[0].strip()))[:500] if lines else type(exc).__name__


def optional_module(name):
    """Import an optional dependency; any failure (not only ImportError) means absent."""
    try:
        return importlib.import_module(name)
    except Exception as e:
        IMPORT_ERRORS[name] = first_line(e)
        return None


def accepted_kwargs(fn):
    """Names `fn` accepts: how bench probes for keyword arguments newer torch versions added."""
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return set()


def version_of(module):
    if module is None:
        return None
    return str(getattr(module, "__version__", None) or "present")


def run_quiet(argv, timeout=10):
    """A helper command's stdout, or None: list arguments, never a shell."""
    try:
        out = subprocess.check_output(argv, stderr=subprocess.DEVNULL, timeout=timeout,
                                      universal_newlines=True)
        return out.strip()
    except Exception:
        return None
