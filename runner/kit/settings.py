"""The kit's settings: its command line (`options`), the cells of its plan (`KitCell`), the time budget of one
call (`Budget`), and what the report and the pack see of a run (`KitView`, so that they need not import it)."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from runner.kit import plan as plans

DEFAULT_STATE = Path("results") / "gpu-evidence"


@dataclass
class KitCell:
    """One cell of the plan, its key in the store and its matrix file once written."""

    phase: plans.Phase
    params: dict[str, Any]
    label: dict[str, str]
    id: str
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


class KitView(Protocol):
    """What the report, the reference loop and the pack use of the kit's run (runner/kit/evidence.py)."""

    args: argparse.Namespace
    state: Path
    db: Path
    log_path: Path
    cells: list[KitCell]
    budget: Budget
    device: dict[str, Any]
    stopped: str

    def say(self, text: str) -> None: ...
    def rel(self, path: Path) -> str: ...
    def missing(self, phases: Sequence[str] | None = None) -> list[tuple[KitCell, int]]: ...
    def estimate_left(self, phases: Sequence[str] | None = None) -> float: ...
    def repeat_estimate(self, c: KitCell, repeat: int = 0) -> float: ...
    def cost(self, c: KitCell, r: int) -> float: ...


def options(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="gpu_evidence", description="Measure what the GPU issues ask for and write "
                                "the report (docs/gpu-evidence.md). Resumes from --state.")
    p.add_argument("--state", type=Path, default=DEFAULT_STATE, help="the kit's store and files (default %(default)s)")
    p.add_argument("--out", type=Path, default=None, help="report folder (default: reports/<GPU name>)")
    p.add_argument("--budget", type=float, default=None, help="seconds this call may take (default: no limit)")
    p.add_argument("--reserve", type=float, default=None,
                   help="seconds of the budget kept for the report and the pack (default 45; dry run 20)")
    p.add_argument("--window", type=float, default=None, help="seconds each measured window lasts at least "
                   "(default 2; dry run 0.05)")
    p.add_argument("--warmup-seconds", type=float, default=None, help="most seconds of warm-up per repeat, "
                   "until the iteration times are steady (default 3; dry 0.05; compiled cells add "
                   "compilation's time)")
    p.add_argument("--repeats", type=int, default=None, help="repeats of every cell in the end (default 3; dry 1)")
    p.add_argument("--only", action="append", default=[], metavar="PHASE", help="measure only this phase "
                   "(repeatable); the report still covers the whole plan")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="where to train (default cuda)")
    p.add_argument("--dry-run", action="store_true", help="the same code path on a CPU with tiny sizes (CI); "
                   "the only way to run the kit without a CUDA device")
    p.add_argument("--pack", type=Path, default=None, help="also write the state and report as one .tar.gz here, "
                   "after every repeat and before the report")
    p.add_argument("--plan", action="store_true", help="print the phases, their device minutes and the whole; "
                   "measure nothing")
    p.add_argument("--no-report", action="store_true", help="measure only; write no report")
    p.add_argument("--report-only", action="store_true", help="write the report from the state; measure nothing")
    args = p.parse_args(argv)
    dry = args.dry_run
    for name, full, small in (("reserve", 45.0, 20.0), ("window", 2.0, 0.05), ("warmup_seconds", 3.0, 0.05),
                              ("repeats", 3, 1)):
        if getattr(args, name) is None:
            setattr(args, name, small if dry else full)
    if dry:
        args.device = "cpu"
    elif args.device == "cpu":
        p.error("--device cpu measures nothing a GPU report needs: --dry-run is the CPU's run")
    for name in ("window", "warmup_seconds"):
        if not (getattr(args, name) > 0 and math.isfinite(getattr(args, name))):
            p.error(f"--{name.replace('_', '-')} must be a finite number above 0")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if args.budget is not None and not (args.budget > 0 and math.isfinite(args.budget)):
        p.error("--budget must be a finite number of seconds above 0")
    if not (args.reserve >= 0 and math.isfinite(args.reserve)):
        p.error("--reserve must be a finite number of seconds of at least 0")
    return args
