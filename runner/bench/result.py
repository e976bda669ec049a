"""The result channel: one MATRIX_RESULT line of strict JSON on the real stdout, whatever else the
run prints (library chatter goes to stderr)."""

import json
import math
import os
import sys

from .args import params_of
from .contract import RESULT_PREFIX, SCHEMA


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
            "host_peak_rss": None, "breakdown": None, "world_size": world,
            "energy_j": None, "images_per_joule": None}


def new_result(args, world):
    return {"schema": SCHEMA, "status": "ok", "reason": None, "params": params_of(args),
            "metrics": empty_metrics(world), "precision": None, "env": None, "workload": None}


def result_line(result):
    """The line that carries `result`: the prefix and strict JSON (NaN and infinities become null)."""
    return RESULT_PREFIX + json.dumps(sanitize(result), allow_nan=False)


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
