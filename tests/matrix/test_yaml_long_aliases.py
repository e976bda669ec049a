"""An alias of a long value used many times is few YAML nodes but gigabytes of text once expanded (a cell's
key, the launcher's argument): the expanded text is bounded too, and refused at once in one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from runner import matrix
from runner.base.errors import ConfigError


def test_a_long_value_aliased_fifty_thousand_times_is_refused_at_once() -> None:
    text = ("name: big\nenvironments: [{name: a, backend: local}]\n"
            "axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}\n"
            f'description: &a "{"x" * 20000}"\n'
            f"workload:\n  argv: [{', '.join(['*a'] * 50000)}]\n  parser: {{kind: matrix}}\n")
    assert len(text) < 300_000  # a 220 KB file: 1 GB of argv, 2 GB of memory and 40 s before the bound
    started = time.monotonic()
    with pytest.raises(ConfigError) as e:
        matrix.parse(text, Path("m.yaml")).cells()
    assert time.monotonic() - started < 5
    assert "m.yaml (line " in str(e.value) and "characters of text" in str(e.value), str(e.value)


def test_a_long_value_aliased_a_few_times_is_still_read() -> None:
    text = ("name: ok\nenvironments:\n  - {name: a, backend: local, env: {NOTE: &n \"" + "y" * 5000 + "\"}}\n"
            "  - {name: b, backend: local, env: {NOTE: *n}}\n"
            "axes: {model: [mlp], precision: [fp32], batch_size: [8], device: [cpu]}\n")
    assert len(matrix.parse(text, Path("m.yaml")).cells()) == 2
