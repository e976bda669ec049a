"""bench against a hand-written loop, one pair of fresh processes per repeat: the ratio bench/loop with its
interval, and whether "within the tolerance" is established, refuted or not yet known.

Each repeat runs both sides back to back, so what drifts between repeats (another tenant, the clock, the page
cache) hits a pair alike; the ratio is estimated from the pairs: the mean of ln(bench_i / loop_i) with its t
interval at matrix's confidence (runner.analysis.significance), back on the ratio scale. A ratio of the two
sides' means, without an interval, let 0.944 read as "outside 3%" on a machine whose repeats vary by 9%: that
figure was as consistent with 1.00 as with 0.94.

The verdict is an equivalence test: `within` only when the whole interval lies inside [1 - tolerance, 1 + tolerance]; `outside` when the whole interval lies beyond one edge;
otherwise `not established`, with the repeats that a spread like this one would need. Exit statuses, as
matrix's (runner/base/exitcodes.py): 0 within, 1 outside, 5 not established, 3 a side did not measure, 70 the script
itself crashed (never 1).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from runner.analysis.significance import CONFIDENCE, t_half_width, t_quantile  # noqa: E402

WITHIN, OUTSIDE, UNDECIDED, NOT_MEASURED, INTERNAL = 0, 1, 5, 3, 70


def guarded(main: Callable[[], int]) -> int:
    """main's exit status, a crash of the script itself (a side's JSON unreadable, a figure missing, a timeout)
    being INTERNAL with its traceback: Python's own status for an uncaught exception is 1, which reads as
    "outside the tolerance" to whoever maps the statuses (runner/kit/reference.py takes 0/1/5 as measured)."""
    try:
        return main()
    except Exception as e:  # noqa: BLE001 - every crash is one status, never 1
        traceback.print_exc()
        print(f"{Path(sys.argv[0]).name}: internal error, nothing judged: {type(e).__name__}: {e}", file=sys.stderr)
        return INTERNAL


@dataclass(frozen=True)
class Paired:
    n: int
    ratio: float     # exp(mean of the log ratios): the typical bench/loop
    low: float       # its interval at CONFIDENCE (nan with fewer than 2 pairs)
    high: float
    log_std: float   # the spread of the log ratios (about the CV of bench/loop)


def paired_ratio(bench: list[float], loop: list[float]) -> Paired:
    """bench_i / loop_i over the pairs: the geometric mean ratio and its t interval."""
    if len(bench) != len(loop) or not bench:
        raise ValueError("paired_ratio needs as many bench figures as loop figures, at least one")
    if any(not (x > 0 and math.isfinite(x)) for x in bench + loop):
        raise ValueError("every figure must be positive and finite")
    logs = [math.log(b) - math.log(r) for b, r in zip(bench, loop, strict=True)]  # b / r may overflow: never
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return Paired(1, _exp(mean), math.nan, math.nan, math.nan)
    std = statistics.stdev(logs)
    half = float(t_half_width(std, len(logs)))
    return Paired(len(logs), _exp(mean), _exp(mean - half), _exp(mean + half), std)


def _exp(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf  # a ratio past a float's range is infinite, not a traceback


def tolerance_arg(text: str) -> float:
    """--tolerance as the scripts take it: a fraction in [0, 1) (0.03 is 3%); anything else is one line."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a tolerance: a fraction from 0 up to (not including) 1, "
                                         "e.g. 0.03 for 3%")
    return value


def verdict(p: Paired, tolerance: float) -> tuple[str, int]:
    """(the sentence, the exit status) for `p` against [1 - tolerance, 1 + tolerance]."""
    if not 0.0 <= tolerance < 1.0:  # 1 or more would call any ratio down to 0 within; NaN nothing at all
        raise ValueError(f"tolerance {tolerance!r}: a fraction from 0 up to (not including) 1")
    lo_edge, hi_edge = 1.0 - tolerance, 1.0 + tolerance
    interval = f"{CONFIDENCE:.0%} interval {p.low:.3f}-{p.high:.3f}"
    if p.n < 2 or math.isnan(p.low):
        return f"not established: one pair has no interval (ratio {p.ratio:.3f}); more repeats", UNDECIDED
    if lo_edge <= p.low and p.high <= hi_edge:
        return f"within {tolerance:.0%} ({interval}, {p.n} pairs)", WITHIN
    if p.high < lo_edge or p.low > hi_edge:
        return f"outside {tolerance:.0%} ({interval}, {p.n} pairs)", OUTSIDE
    need = pairs_needed(p, tolerance)
    more = f"about {need} pairs at this spread" if need else "a ratio closer to 1 or a quieter machine"
    return (f"not established: the {interval} reaches past {tolerance:.0%} ({p.n} pairs; {more})", UNDECIDED)


def pairs_needed(p: Paired, tolerance: float) -> int | None:
    """The pairs that would put an interval of this spread around this ratio inside the tolerance, or None when
    no number would (the ratio itself is at or past an edge)."""
    room = min(math.log(1.0 + tolerance) - math.log(p.ratio), math.log(p.ratio) - math.log(1.0 - tolerance))
    if room <= 0 or not p.log_std > 0:
        return None
    n = p.n + 1
    while n < 10_000:
        if float(t_quantile(n - 1)) * p.log_std / math.sqrt(n) <= room:
            return n
        n += 1
    return None


def summary_lines(p: Paired, tolerance: float, unit: str) -> tuple[list[str], int]:
    """The lines every bench-against-loop script prints last (the verdict last), and its exit status."""
    text, code = verdict(p, tolerance)
    spread = "" if math.isnan(p.log_std) else f", pair-to-pair spread {p.log_std:.1%}"
    return [f"bench / reference ({unit}, geometric mean of {p.n} pairs): {p.ratio:.3f}{spread}",
            f"bench / reference: {p.ratio:.3f}, {text}"], code


def run_json(argv: list[str], prefix: str = "") -> dict[str, Any]:
    """One side's fresh process: the last line of its stdout that starts with `prefix`, as JSON; a side that fails
    or prints nothing ends the comparison with NOT_MEASURED."""
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines = [ln[len(prefix):] for ln in proc.stdout.splitlines() if ln.startswith(prefix) and ln[len(prefix):].strip()]
    if proc.returncode != 0 or not lines:
        print(f"{' '.join(argv[:2])} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        raise SystemExit(NOT_MEASURED)
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def stats(values: list[float]) -> tuple[float, float, float]:
    """Mean, standard deviation and CV of one side's figures."""
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else float("nan")
    return mean, std, std / mean if mean else float("nan")
