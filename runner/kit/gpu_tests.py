"""The GPU tests at the start of the first call: `pytest -m gpu` on the lever-loss tests (plan.GPU_TESTS), whose
tolerances are reasoned but were never run on a GPU, within a budget of their own (plan.GPU_TESTS_S: the whole
process group is stopped there). Their log and a record of what they said stay in the state, so the pack carries
them; they run once a state, a later call reads the record."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from runner.base import safewrite
from runner.kit.reference import ROOT, pythonpath, run_group
from runner.kit.settings import KitCell, KitView

LOG, RECORD = "gpu-tests.log", "gpu-tests.json"


def done(state: Path) -> bool:
    return (state / RECORD).exists()


def record(state: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((state / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run(kit: KitView, c: KitCell) -> bool:
    """pytest -m gpu on the phase's paths, stopped at its budget; False when the call's budget has no room for it."""
    if done(kit.state):
        return True
    seconds = kit.cost(c, 0)
    if seconds > kit.budget.left():
        kit.stopped = "budget"
        kit.say(f"gpu-tests: needs ~{seconds:.0f} s, {kit.budget.text()}: next call")
        return False
    # The project's warning filters name pandas' newest warning class; a GPU machine's older pandas would stop pytest
    # at its start over them, so the lever tests run without them (they assert losses, not warnings).
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-o", "filterwarnings=",
            *c.phase.tests]
    started = time.monotonic()
    code, out, err = run_group(argv, min(seconds, kit.budget.left()), {**os.environ, "PYTHONPATH": pythonpath()},
                               cwd=ROOT)
    took = time.monotonic() - started
    lines = [ln for ln in (out + err).strip().splitlines() if ln.strip()]
    summary = (f"stopped at its budget of {seconds:.0f} s (the log has the tests that ended)" if code is None
               else (lines[-1] if lines else f"exit {code}, no output"))
    kit.state.mkdir(parents=True, exist_ok=True)
    safewrite.write_text(kit.state / LOG, f"$ python {' '.join(argv[1:])}\n{out}{err}")
    safewrite.write_text(kit.state / RECORD, json.dumps(
        {"argv": argv[1:], "exit": code, "seconds": round(took, 1), "summary": summary}, indent=1))
    kit.say(f"gpu-tests: {summary} (exit {code}; {took:.0f} s; log {kit.rel(kit.state / LOG)}; {kit.budget.text()})")
    return True


def words(state: Path) -> str:
    """One sentence for the page: what the GPU tests said, or that they have not run."""
    rec = record(state)
    if rec is None:
        return "The GPU tests (`pytest -m gpu` on the levers' losses) have not run on this state yet."
    return (f"The GPU tests (`python {' '.join(rec.get('argv') or [])}`, {rec.get('seconds')} s): {rec.get('summary')} "
            f"(exit {rec.get('exit')}; the log is the state's `{LOG}`).")
