"""The benchmark that runs inside every environment; bench.py is copied there as one file."""

from __future__ import annotations

import pathlib

BENCH_PATH = pathlib.Path(__file__).with_name("bench.py")
