"""The benchmark's fixtures (defined with the tests they were written for) for every test file here."""

from __future__ import annotations

from tests.bench.test_bench import bench_main, fake_gpu  # noqa: F401
