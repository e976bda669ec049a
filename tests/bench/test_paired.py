"""benchmarks/paired.py: bench against the hand-written loop is judged from the pairs with an interval, never
from a ratio of means alone."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.paired import (  # noqa: E402
    NOT_MEASURED,
    OUTSIDE,
    UNDECIDED,
    WITHIN,
    paired_ratio,
    pairs_needed,
    summary_lines,
    verdict,
)


def test_the_figures_of_the_last_report_do_not_establish_outside() -> None:
    """The 10 repeats that read as "0.944, outside 3%" (reports/transformer-cpu, 24 Nov): their pairs' interval
    holds 1.0, so the honest answer is "not established", with the pairs a spread like that needs."""
    bench = [46516.9, 40226.7, 38110.7, 41630.6, 42140.5, 41587.6, 42828.7, 51468.2, 41675.3, 46804.8]
    loop = [55778.9, 48335.3, 41686.4, 44860.6, 45430.4, 41482.2, 47324.5, 46121.2, 43942.9, 43532.1]
    p = paired_ratio(bench, loop)
    assert p.n == 10 and 0.93 < p.ratio < 0.96 and p.low < 0.97 and p.high > 0.97
    text, code = verdict(p, 0.03)
    assert code == UNDECIDED and text.startswith("not established")


def test_within_only_when_the_whole_interval_is_inside() -> None:
    loop = [100.0, 110.0, 95.0, 105.0, 100.0, 98.0]
    bench = [x * f for x, f in zip(loop, (1.001, 0.999, 1.002, 0.998, 1.0, 1.001), strict=True)]
    p = paired_ratio(bench, loop)
    assert abs(p.ratio - 1.0) < 0.002 and p.low > 0.99 and p.high < 1.01
    assert verdict(p, 0.03)[1] == WITHIN
    # the same pairs shifted by 2%: still inside 3%; by 5%: outside, as the whole interval is past the edge
    assert verdict(paired_ratio([b * 0.98 for b in bench], loop), 0.03)[1] == WITHIN
    assert verdict(paired_ratio([b * 0.95 for b in bench], loop), 0.03)[1] == OUTSIDE
    assert verdict(paired_ratio([b * 1.05 for b in bench], loop), 0.03)[1] == OUTSIDE


def test_a_ratio_of_one_with_a_wide_spread_is_not_within() -> None:
    """A mean ratio of exactly 1 is no evidence when the pairs scatter by 10%: not established."""
    loop = [100.0] * 4
    bench = [110.0, 90.0, 110.0, 90.91]
    p = paired_ratio(bench, loop)
    text, code = verdict(p, 0.03)
    assert code == UNDECIDED and "pairs at this spread" in text
    need = pairs_needed(p, 0.03)
    assert need is not None and need > 4


def test_one_pair_has_no_interval_and_bad_figures_are_refused() -> None:
    p = paired_ratio([100.0], [100.0])
    assert math.isnan(p.low) and verdict(p, 0.03)[1] == UNDECIDED
    with pytest.raises(ValueError):
        paired_ratio([100.0, 0.0], [100.0, 100.0])
    with pytest.raises(ValueError):
        paired_ratio([100.0, float("nan")], [100.0, 100.0])
    with pytest.raises(ValueError):
        paired_ratio([100.0], [100.0, 100.0])
    assert NOT_MEASURED not in (WITHIN, OUTSIDE, UNDECIDED)


def test_the_verdict_is_the_last_line() -> None:
    lines, code = summary_lines(paired_ratio([100.0, 101.0, 99.5], [100.0, 100.5, 100.0]), 0.03, "tok/s")
    assert lines[-1].startswith("bench / reference: ") and "tok/s" in lines[0] and code in (WITHIN, UNDECIDED)


def test_a_tolerance_of_one_or_more_is_refused_not_within() -> None:
    """--tolerance 1.5 called an interval of 0.57-1.92 'within 150%', 1 called anything down to 0 within, NaN
    said 'reaches past nan%', and a ratio past 1 + tolerance with such a tolerance was a math domain traceback."""
    import argparse

    from benchmarks.paired import tolerance_arg

    p = paired_ratio([1.0, 1.1], [1.0, 1.0])
    for bad in (1.0, 1.5, -0.03, math.nan):
        with pytest.raises(ValueError, match="a fraction from 0 up to"):
            verdict(p, bad)
    for text in ("1.5", "-0.03", "nan", "3%"):
        with pytest.raises(argparse.ArgumentTypeError, match="is not a tolerance"):
            tolerance_arg(text)
    assert tolerance_arg("0") == 0.0 and tolerance_arg("0.03") == 0.03


def test_figures_far_apart_are_a_ratio_not_a_traceback() -> None:
    """bench / loop overflowed (1e300 / 1e-300) or underflowed to 0 before its log: a traceback from the summary."""
    far = paired_ratio([1e300, 2e300], [1e-300, 1e-300])
    assert far.ratio == math.inf and verdict(far, 0.03)[1] == OUTSIDE
    near_zero = paired_ratio([1e-300, 2e-300], [1e300, 1e300])
    assert near_zero.ratio == 0.0 and verdict(near_zero, 0.03)[1] == OUTSIDE


def test_a_crash_of_the_script_is_not_exit_1_outside(capsys: pytest.CaptureFixture[str]) -> None:
    """An uncaught exception (a side's JSON unreadable, a figure of 0, the 30-minute timeout) exited 1, the status
    that says "outside the tolerance", and the kit takes 0/1/5 as measured."""
    from benchmarks.paired import INTERNAL, guarded

    def crashes() -> int:
        raise KeyError("throughput")

    assert guarded(crashes) == INTERNAL != OUTSIDE
    assert "internal error, nothing judged: KeyError" in capsys.readouterr().err
    assert guarded(lambda: UNDECIDED) == UNDECIDED
    with pytest.raises(SystemExit):
        guarded(lambda: (_ for _ in ()).throw(SystemExit(NOT_MEASURED)))
    for script in ("bench_vs_reference.py", "transformer_vs_reference.py"):
        text = (Path(__file__).resolve().parents[2] / "benchmarks" / script).read_text()
        assert "sys.exit(guarded(main))" in text and "raise SystemExit(\"" not in text
