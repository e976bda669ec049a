"""The Benjamini-Hochberg adjustment without scipy.stats (runner/analysis/significance.py) is scipy's, to the bit."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import false_discovery_control

from runner.analysis import significance


def cases() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    out = [np.array([0.5]), np.array([0.0, 1.0]), np.array([0.01, 0.01, 0.01]), np.array([1e-300, 1.0, 0.04])]
    for m in (2, 3, 5, 8, 13, 50, 400):
        out.append(rng.uniform(size=m))
        out.append(rng.uniform(size=m) ** 6)  # many small: rejections
        out.append(np.round(rng.uniform(size=m), 2))  # ties
        out.append(np.concatenate([np.zeros(m // 3), np.ones(m // 3), rng.uniform(size=m - 2 * (m // 3))]))
    return out


@pytest.mark.parametrize("i", range(len(cases())))
def test_the_same_adjusted_p_values_as_scipy(i: int) -> None:
    ps = cases()[i]
    ours = significance.benjamini_hochberg(ps.copy())
    theirs = false_discovery_control(ps.copy(), method="bh")
    assert np.array_equal(ours, theirs), (ps, ours, theirs)
    assert ours.tobytes() == np.asarray(theirs, dtype=float).tobytes()


def test_undecided_stay_undecided_and_do_not_count() -> None:
    got = significance.adjust([0.01, math.nan, 0.04, 0.03])
    assert math.isnan(got[1])
    assert np.array_equal(got[[0, 2, 3]], false_discovery_control([0.01, 0.04, 0.03], method="bh"))
    assert np.isnan(significance.adjust([math.nan, math.nan])).all()


def test_adjusting_imports_no_scipy_stats() -> None:
    code = ("import sys\nfrom runner.analysis import significance\nsignificance.adjust([0.01, 0.2, 0.03])\n"
            "print('scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
