"""Work that makes many objects that all live to its end (a store's rows, their frame, a report's views and files):
Python's cyclic garbage collector, started by allocation counts, walks every object still alive each time it runs
a full pass, and over such work it runs again and again while finding almost nothing to free. On a report of 10,000
repeats that was a third of the time (benchmarks/report_gen.py: 6.95 s with it, 4.78 s without, the same peak
memory, 306 MiB), so the commands that read a whole store and analyse it run as one batch, with the collector
paused; it resumes when they return (a process that goes on, a test session, collects as before)."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off for the block (reference counting still frees what is no longer used), back on after
    it, however it ends; inside a block already paused (or where it was off) nothing changes."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def batch(f: Callable[P, R]) -> Callable[P, R]:
    """`f` run with the collector paused (collector_paused)."""

    @functools.wraps(f)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with collector_paused():
            return f(*args, **kwargs)

    return run
