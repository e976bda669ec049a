"""Fisher's exact test without scipy.stats (runner/analysis/significance.py `_fisher`): the p-value scipy's
fisher_exact defines, in exact arithmetic rounded once, within 1e-15 of scipy's own float sums (relative)."""

from __future__ import annotations

import math
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from scipy.stats import fisher_exact

from runner.analysis import significance


def theirs(a: int, b: int, c: int, d: int) -> float:
    return float(fisher_exact([[a, b], [c, d]], alternative="two-sided").pvalue)


def test_every_table_of_up_to_12_repeats_a_side_is_scipys_within_1e_15() -> None:
    worst = 0.0
    for na in range(1, 13):
        for nb in range(1, 13):
            for ba in range(na + 1):
                for bb in range(nb + 1):
                    ours, ref = significance._fisher(na - ba, ba, nb - bb, bb), theirs(na - ba, ba, nb - bb, bb)
                    worst = max(worst, abs(ours - ref) / ref)
                    assert abs(ours - ref) <= 1e-15 * ref, (na, ba, nb, bb, ours, ref)
    assert worst > 0  # scipy's sums round more than once: the two are not the same function by accident


@pytest.mark.parametrize("table", [(200, 3, 180, 25), (1000, 0, 990, 10), (5, 45, 40, 10), (3, 0, 0, 3),
                                   (0, 0, 5, 5), (7, 7, 7, 7), (1, 2, 3, 4)])
def test_large_and_edge_tables(table: tuple[int, int, int, int]) -> None:
    ours, ref = significance._fisher(*table), theirs(*table)
    assert abs(ours - ref) <= 1e-15 * ref, (table, ours, ref)


def test_the_exact_value_of_a_textbook_table() -> None:
    """[[8, 2], [1, 5]] (scipy's own example, 0.0349650...): the tables at least as unlikely, summed exactly."""
    weights = {x: math.comb(10, x) * math.comb(6, 9 - x) for x in range(3, 10)}
    exact = Fraction(sum(w for w in weights.values() if w <= weights[8]), math.comb(16, 9))
    assert significance._fisher(8, 2, 1, 5) == float(exact) == pytest.approx(0.034965034965034975, rel=1e-15)


def test_a_change_of_outcome_imports_no_scipy_stats() -> None:
    code = ("import sys\nfrom runner.analysis import significance\n"
            "print(significance.rate_difference(0, 10, 6, 10).p_value, 'scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split()[-1] == "False", done.stderr[-2000:]
    assert np.isfinite(float(done.stdout.split()[0]))


def test_thousands_of_failing_repeats_take_no_time_and_beyond_the_exact_sums_reach_scipy_answers() -> None:
    import time

    significance._fisher.cache_clear()
    t = time.perf_counter()
    near = significance._fisher(2000, 2000, 2100, 1900)  # 4,000 tables with these margins: summed exactly
    assert time.perf_counter() - t < 2.0
    assert abs(near - theirs(2000, 2000, 2100, 1900)) <= 1e-15 * near
    beyond = (6000, 6000, 6400, 5600)                       # 12,000: scipy's own floats
    assert significance._fisher(*beyond) == theirs(*beyond)
