"""Where the report of a big store spends its time: each stage of `matrix report` timed apart, best of rounds.

    .venv/bin/python benchmarks/report_stages.py [--repeats 10000] [--rounds 3]

The same synthetic store as benchmarks/report_gen.py (5 environments, 3 models, 4 precisions, 5 batch sizes). Stages:
the store read, the frame (admission per repeat), the history, the views (`views.build`, and inside it the comparison
families alone), each data format written apart and the chart specs. The PNG charts are drawn in a helper process
(runner/report/painter.py) and repeats.csv in a forked child (runner/base/aside.py) while the report builds its
views; both are timed here in this process, and report_gen.py times the whole command.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import report_gen  # noqa: E402

import runner.report as report  # noqa: E402
from runner import analysis as an  # noqa: E402
from runner.base.gcpause import collector_paused  # noqa: E402
from runner.report import pairs, render, views  # noqa: E402
from runner.report.formats import FORMATS  # noqa: E402
from runner.report.formats.csv import repeats_csv  # noqa: E402


def best(rounds: int, f: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(rounds):
        gc.collect()
        with collector_paused():  # as `matrix report` runs (runner/base/gcpause.py)
            t = time.perf_counter()
            out = f()
            times.append(time.perf_counter() - t)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        report_gen.fill(db, args.repeats)
        out = Path(tmp) / "out"
        out.mkdir()
        n = args.rounds
        stages: dict[str, float] = {}
        stages["store read"], (infos, run_ids, rows) = best(n, lambda: report._read(db, None))
        newest = report.newest(rows)
        stages["frame (admission per repeat)"], (df, records, name) = best(
            n, lambda: report._frame(infos, run_ids, newest, db, rows))
        stages["history"], hist = best(n, lambda: report._history(rows))
        stages["views.build"], model = best(
            n, lambda: views.build(df, records, name, history=hist, provenance=None, stored=len(rows)))
        shown = an.choose(df, an.CELL_KEYS).frame
        summary = an.summarize(shown)
        stages["  of which the comparison families"], _ = best(n, lambda: pairs.families(shown, summary))
        for f in ("md", "html", "csv", "json"):
            stages[f"write {f} (no charts)"], _ = best(n, partial(FORMATS.get(f).write, model, out, {}))
            if f == "csv":  # `matrix report` makes this part in a forked child while it builds the views
                stages["  of which repeats.csv (made aside)"], _ = best(n, lambda: repeats_csv(df))
        stages["chart specs"], _ = best(n, lambda: render.report_charts(model))
    print(f"{args.repeats} repeats, best of {n} rounds each:")
    for k, v in stages.items():
        print(f"  {k:38s} {v:6.2f} s")
    whole = sum(v for k, v in stages.items() if not k.startswith("  "))
    print(f"  {'sum of the stages':38s} {whole:6.2f} s (the PNGs drawn aside, the imports not counted)")


if __name__ == "__main__":
    main()
