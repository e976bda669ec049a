"""The kit's settings: its command line (`options`), the cells of its plan with what calibration decided
(`KitCell`), and the time budget of one call (`Budget`, `Deadline`)."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.kit import plan as plans

DEFAULT_STATE = Path("results") / "gpu-evidence"


@dataclass
class KitCell:
    """One cell of the plan and what calibration decided for it."""

    phase: plans.Phase
    params: dict[str, Any]
    label: dict[str, str]
    id: str
    iterations: int | None = None
    warmup: int | None = None
    t_iter: float | None = None
    calibrated: str | None = None      # the probe's status: ok, unsupported, oom, failed
    reason: str | None = None
    key: str = ""
    path: Path | None = None


@dataclass
class Budget:
    """Seconds this call may take, counted from its start; `reserve` is kept for the report and the pack."""

    seconds: float | None
    reserve: float
    started: float = field(default_factory=time.monotonic)

    def left(self) -> float:
        if self.seconds is None:
            return math.inf
        return self.seconds - self.reserve - (time.monotonic() - self.started)

    def text(self) -> str:
        left = self.left()
        return "no time limit" if math.isinf(left) else f"{max(left, 0.0):.0f} s left of the budget"


class Deadline(Exception):
    """The budget's timer fired while a repeat was running."""


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_evidence", description="Measure what the GPU issues ask for and write "
                                "the report (docs/gpu-evidence.md). Resumes from --state.")
    p.add_argument("--state", type=Path, default=DEFAULT_STATE, help="the kit's store and files (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: reports/<GPU name>)")
    p.add_argument("--budget", type=float, default=None, help="seconds this call may take (default: no limit)")
    p.add_argument("--reserve", type=float, default=None,
                   help="seconds of the budget kept for the report and the pack (default 60; dry run 30)")
    p.add_argument("--window", type=float, default=None, help="seconds each measured window lasts at least "
                   "(default 2; dry run 0.05)")
    p.add_argument("--warmup-seconds", type=float, default=None, help="warm-up per repeat (default 1; dry 0.02)")
    p.add_argument("--repeats", type=int, default=None, help="repeats of the ResNet-50 phases (default 5; dry 1)")
    p.add_argument("--writeup-repeats", type=int, default=None, help="repeats of the write-ups' grids "
                   "(default 3; dry 1)")
    p.add_argument("--only", action="append", default=[], metavar="PHASE", help="only this phase (repeatable)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to train (default cuda)")
    p.add_argument("--dry-run", action="store_true", help="the same code path on a CPU with tiny sizes (CI)")
    p.add_argument("--pack", type=Path, default=None, help="also write the state and report as one .tar.gz here")
    p.add_argument("--plan", action="store_true", help="print the plan and its estimate; measure nothing")
    p.add_argument("--no-report", action="store_true", help="measure only; write no report")
    args = p.parse_args(argv)
    dry = args.dry_run
    for name, full, small in (("reserve", 60.0, 30.0), ("window", 2.0, 0.05), ("warmup_seconds", 1.0, 0.02),
                              ("repeats", 5, 1), ("writeup_repeats", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, small if dry else full)
    if dry:
        args.device = "cpu"
    for name in ("window", "warmup_seconds"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be above 0")
    if args.repeats < 1 or args.writeup_repeats < 1:
        p.error("--repeats and --writeup-repeats must be at least 1")
    return args
