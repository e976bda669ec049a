"""How a run can go wrong, and how a failure is told apart: bad arguments, unsupported here, out of
memory, an operator missing for a dtype."""

from .compat import torch


class BadArgs(Exception):
    """The invocation cannot be right (exit 2, one line, no result)."""


class Unsupported(Exception):
    """This environment or device cannot run the requested combination (exit 4, a result)."""


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
