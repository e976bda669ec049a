"""The kit's run: calibrate every cell, then measure the phases in priority order, in rounds (repeat 1 of every
cell of a phase, then repeat 2, ...), each repeat through `matrix run` on the local backend into the kit's
own store, within a time budget; write the report; pack the state so that the next call resumes.

    python3 scripts/gpu_evidence.py [--budget 540] [--pack FILE] [--only PHASE] [--dry-run]

Nothing is measured twice: a repeat that is stored (whatever its status) is not run again, and a cell's
iterations are fixed the first time it is calibrated (they are part of its definition). The budget is
respected two ways: a repeat whose estimated time does not fit in what is left is not started, and a timer
stops the one in flight at the deadline (it is stored `cancelled` and runs again next time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from runner.exitcodes import Exit
from runner.kit import output
from runner.kit import plan as plans
from runner.kit.output import pythonpath
from runner.kit.settings import Budget, KitCell, options

GPU_ENV, DRY_ENV = "local-gpu", "dry-run-cpu"
MIN_ITERATIONS, MIN_WARMUP = {"cuda": 5, "cpu": 2}, {"cuda": 3, "cpu": 1}
RESIZE_BELOW = 0.95       # a first window this much shorter than asked: the cell is sized again, once
ITERATIONS_MARGIN = 1.2   # the probe's iteration time is a guess: aim 20% above the window asked for
FIRST_OVERHEAD_S = {"cuda": 15.0, "cpu": 4.0}  # a repeat's cost besides its iterations, until measured
CALIBRATION_OVERHEAD_S = {"cuda": 4.0, "cpu": 0.5}


class Kit:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state: Path = args.state
        self.db = self.state / "store.db"
        self.log_path = self.state / "kit.log"
        self.env_name = DRY_ENV if args.dry_run else GPU_ENV
        self.budget = Budget(args.budget, args.reserve)
        self.data_dir = self.state / "cache" / "jpeg-images"
        phases = plans.build(args.repeats, args.writeup_repeats, args.dry_run, args.device, self._rel(self.data_dir))
        self.phases = plans.select(phases, args.only)
        self.cells = [KitCell(phase, dict(params), dict(label), plans.cell_id(params))
                      for phase in self.phases for params, label in zip(phase.cells, phase.labels, strict=True)]
        self.decided = self._load_json(self.state / "cells.json")
        self.overheads: list[float] = []
        self.stopped = ""

    # --- files -------------------------------------------------------------------------------------
    @staticmethod
    def _rel(path: Path) -> str:
        """A path as cells name it: relative to the working directory when inside it (keys stay the same
        wherever the checkout lies), else absolute."""
        try:
            return str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path.resolve())

    @staticmethod
    def _load_json(path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save_decided(self) -> None:
        tmp = self.state / "cells.json.tmp"
        tmp.write_text(json.dumps(self.decided, indent=1, sort_keys=True))
        os.replace(tmp, self.state / "cells.json")

    def say(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        line = f"[gpu-evidence {stamp}] {text}"
        print(line, flush=True)
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """matrix run's own output goes to the kit's log; the kit prints one line per repeat."""
        with open(self.log_path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            yield

    # --- the steps ---------------------------------------------------------------------------------
    def run(self) -> int:
        self.state.mkdir(parents=True, exist_ok=True)
        self.say(f"state {self.state}, {len(self.phases)} phases, {len(self.cells)} cells, "
                 f"device {self.args.device}{' (dry run)' if self.args.dry_run else ''}; {self.budget.text()}")
        if any(p.name == "wrn-apex-levels" for p in self.phases) and not self.args.plan:
            from runner.kit.images import make_image_folder
            made = make_image_folder(self.data_dir, per_class=8 if self.args.dry_run else 260)
            if made:
                self.say(f"wrote {made} JPEG images under {self._rel(self.data_dir)}")
        if self.args.plan:
            self.apply_decided()  # what earlier calls calibrated; the rest is estimated without a probe
        else:
            self.calibrate()
        self.write_matrices()
        self.print_plan()
        if self.args.plan:
            return int(Exit.OK)
        try:
            self.measure()
        except KeyboardInterrupt:
            self.stopped = self.stopped or "interrupted"
        left = self.remaining()
        if not self.args.no_report:
            output.report(self)
        output.pack(self)
        if self.stopped == "interrupted":
            return int(Exit.INTERRUPTED)
        if left:
            self.say(f"NOT complete: {left} repeats left (~{self.estimate_left():.0f} s); run the same command "
                     "again to continue")
            return int(Exit.NOT_MEASURED)
        self.say("complete: every repeat of the plan is stored")
        return int(Exit.OK)

    def calibrate(self) -> None:
        """Probe the cells not decided yet, in one process, and fix their iterations and warm-up."""
        todo = list({c.id: c for c in self.cells if c.id not in self.decided}.values())
        if todo:
            probe_in = self.state / "calibrate-cells.json"
            out = self.state / "calibration.jsonl"
            payload = [{"id": c.id, "args": self._bench_args(c)} for c in todo]
            probe_in.write_text(json.dumps(payload))
            timeout = self.budget.left()
            self.say(f"calibrating {len(todo)} cells in one process"
                     + ("" if math.isinf(timeout) else f" (at most {max(timeout, 0):.0f} s)"))
            if timeout > 0:
                with open(self.log_path, "a") as log:
                    proc = subprocess.Popen([sys.executable, "-m", "runner.kit.calibrate", str(probe_in), str(out)],
                                            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                            env={**os.environ, "PYTHONPATH": pythonpath()})
                    try:
                        proc.wait(timeout=None if math.isinf(timeout) else timeout)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                        self.say("calibration stopped at the budget: the cells not probed wait for the next call")
            probed = {}
            for line in (out.read_text().splitlines() if out.exists() else []):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                probed[rec["id"]] = rec
            for c in todo:
                rec = probed.get(c.id)
                if rec is not None:
                    self.decided[c.id] = self._decide(rec)
            self._save_decided()
        self.apply_decided()

    def apply_decided(self) -> None:
        for c in self.cells:
            d = self.decided.get(c.id)
            if d is not None:
                c.iterations, c.warmup, c.t_iter = d["iterations"], d["warmup"], d["t_iter"]
                c.calibrated, c.reason = d["status"], d.get("reason")

    def _decide(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Iterations for a window of at least --window seconds, warm-up of --warmup-seconds."""
        t = rec.get("t_iter")
        low, least = MIN_ITERATIONS[self.args.device], MIN_WARMUP[self.args.device]
        if rec.get("status") == "ok" and t:
            iterations = max(low, math.ceil(self.args.window * ITERATIONS_MARGIN / t))
            warmup = min(500, max(least, math.ceil(self.args.warmup_seconds / t)))
        else:  # it will not train: its repeats only record why, as quickly as they can
            iterations, warmup = low, 1
        return {"iterations": iterations, "warmup": warmup, "t_iter": t, "status": rec.get("status"),
                "reason": rec.get("reason"), "device_name": rec.get("device_name"),
                "probe_s": rec.get("probe_s"), "window_asked_s": self.args.window}

    def _bench_args(self, c: KitCell) -> list[str]:
        from runner.backends.local import LocalEnvironment
        from runner.spec import Cell, RunSettings
        cell = Cell(LocalEnvironment(name=self.env_name), c.params, RunSettings(iterations=1, warmup=0))
        return cell.bench_args()

    def matrix_text(self, c: KitCell, repeats: int) -> str:
        est = self.repeat_estimate(c)
        doc = {"name": f"gpu-evidence-{c.phase.name}",
               "description": c.phase.title,
               "environments": [{"name": self.env_name, "backend": "local"}],
               "axes": {k: [v] for k, v in c.params.items()},
               "run": {"iterations": c.iterations, "warmup": c.warmup, "repeats": repeats,
                       "timeout": max(300, math.ceil(10 * est)), "seed": 0}}
        return yaml.safe_dump(doc, sort_keys=False)

    def write_matrices(self) -> None:
        from runner import matrix
        folder = self.state / "matrices"
        folder.mkdir(exist_ok=True)
        for c in self.cells:
            if c.iterations is None:
                continue
            c.path = folder / f"{c.phase.name}-{c.id}.yaml"
            c.path.write_text(self.matrix_text(c, c.phase.repeats))
            cells = matrix.load(c.path).cells()
            assert len(cells) == 1, c.path
            c.key = cells[0].key

    # --- estimates -------------------------------------------------------------------------------------
    def overhead(self) -> float:
        """A repeat's seconds besides its iterations: measured once repeats ran, else a first guess."""
        if self.overheads:
            return statistics.median(self.overheads)
        return FIRST_OVERHEAD_S[self.args.device]

    def repeat_estimate(self, c: KitCell) -> float:
        if c.t_iter and c.iterations is not None and c.warmup is not None:
            return self.overhead() + (c.iterations + c.warmup) * c.t_iter
        return self.overhead()

    def stored(self) -> dict[tuple[str, int], str]:
        from runner.store import Store
        if not self.db.exists():
            return {}
        with Store(self.db, readonly=True) as store:
            return {k: v.value for k, v in store.latest_statuses(c.key for c in self.cells if c.key).items()}

    def missing(self, stored: dict[tuple[str, int], str] | None = None) -> list[tuple[KitCell, int]]:
        stored = self.stored() if stored is None else stored
        out: list[tuple[KitCell, int]] = []
        for c in self.cells:
            if c.phase.reference:
                if not output.reference_path(self, c).exists():
                    out.extend((c, r) for r in range(c.phase.repeats))
                continue
            for r in range(c.phase.repeats):
                if c.key == "" or stored.get((c.key, r)) in (None, "cancelled", "not_started"):
                    out.append((c, r))
        return out

    def remaining(self) -> int:
        return len(self.missing())

    def estimate_left(self) -> float:
        total = 0.0
        for c, _ in self.missing():
            total += self.repeat_estimate(c) * (2 if c.phase.reference else 1)
            if c.iterations is None:
                total += CALIBRATION_OVERHEAD_S[self.args.device]
        return total

    def print_plan(self) -> None:
        stored = self.stored()
        for phase in self.phases:
            cells = [c for c in self.cells if c.phase is phase]
            todo = [m for m in self.missing(stored) if m[0].phase is phase]
            secs = sum(self.repeat_estimate(c) * (2 if phase.reference else 1) for c, _ in todo)
            self.say(f"phase {phase.name}: {len(cells)} cells x {phase.repeats} repeats, {len(todo)} to run "
                     f"(~{secs:.0f} s): {phase.title}")
        self.say(f"plan: {self.remaining()} repeats to run, ~{self.estimate_left():.0f} s; {self.budget.text()}")

    # --- measuring ---------------------------------------------------------------------------------
    def measure(self) -> None:
        for phase in self.phases:
            cells = [c for c in self.cells if c.phase is phase]
            if phase.reference:
                for c in cells:
                    if not output.run_reference(self, c):
                        return
                continue
            for r in range(phase.repeats):
                for c in cells:
                    if c.path is None:
                        if r == 0:
                            self.say(f"{phase.name} {self.describe(c)}: not calibrated yet; next call")
                        continue
                    if not self.catch_up(c, r):
                        return

    def catch_up(self, c: KitCell, r: int) -> bool:
        """Run the cell's repeats up to number r that are not stored (each tried once in this call); False when
        the budget stops the kit."""
        tried: set[tuple[str, int]] = set()
        while True:
            stored = self.stored()
            todo = [rr for rr in range(r + 1) if (c.key, rr) not in tried
                    and stored.get((c.key, rr)) in (None, "cancelled", "not_started")]
            if not todo:
                return True
            tried.add((c.key, todo[0]))
            need = self.repeat_estimate(c)
            if need > self.budget.left():
                self.stopped = "budget"
                self.say(f"stopping: the next repeat needs ~{need:.0f} s, {self.budget.text()}")
                return False
            if not self.run_repeat(c, todo[0]):
                return False

    def describe(self, c: KitCell) -> str:
        bits = []
        for k, v in c.params.items():
            if k in ("device", "threads", "eval_batches") or (k == "dataset" and v == "synthetic"):
                continue
            bits.append(f"{k}={str(v).split(':')[0] if k == 'dataset' else v}")
        return " ".join([*bits, *(f"{k}={v}" for k, v in c.label.items())])

    def run_repeat(self, c: KitCell, r: int) -> bool:
        """One repeat through `matrix run`; False when the budget's timer stopped it."""
        assert c.path is not None
        c.path.write_text(self.matrix_text(c, r + 1))
        started = time.monotonic()
        deadline = self.budget.left()
        code = self._matrix_run(c.path, deadline)
        took = time.monotonic() - started
        row = self._row(c.key, r)
        status = row["status"] if row else "not stored"
        metrics = (row or {}).get("metrics") or {}
        if status == "ok" and c.t_iter:
            self.overheads.append(max(0.0, took - ((c.iterations or 0) + (c.warmup or 0)) * c.t_iter))
        elif status in ("unsupported", "oom", "failed"):
            self.overheads.append(took)
        words = status
        if status == "ok":
            tel = metrics.get("telemetry") or {}
            words = (f"{metrics.get('throughput') or 0:.1f} img/s over {metrics.get('window_s') or 0:.2f} s"
                     + (f", {metrics['images_per_joule']:.2f} img/J" if metrics.get("images_per_joule") else "")
                     + (", THROTTLED" if tel.get("throttled") else ""))
        elif row and row.get("reason"):
            words += f": {str(row['reason'])[:120]}"
        self.say(f"{c.phase.name} repeat {r + 1}/{c.phase.repeats} {self.describe(c)}: {words} "
                 f"({took:.1f} s; {self.budget.text()})")
        if status == "ok" and code != Exit.INTERRUPTED:
            self.resize(c, metrics)
        if code == Exit.INTERRUPTED:
            self.stopped = self.stopped or "interrupted"
            return False
        return True

    def resize(self, c: KitCell, metrics: dict[str, Any]) -> None:
        """A window shorter than asked (the probe guessed the iteration time low): size the cell again from its
        own iteration times, once. The short repeat stays stored under the old definition (reports show the
        newest and list the other)."""
        window, iterations = metrics.get("window_s"), c.iterations or 0
        d = self.decided.get(c.id, {})
        if self.args.dry_run or not isinstance(window, int | float) or window >= RESIZE_BELOW * self.args.window \
                or d.get("resized_from") or iterations <= 0 or window <= 0:
            return  # (a dry run's windows of milliseconds are noise: it keeps its first sizes)
        t = window / iterations
        new = max(MIN_ITERATIONS[self.args.device], math.ceil(self.args.window * ITERATIONS_MARGIN / t))
        d.update(resized_from=iterations, iterations=new, t_iter=t)
        self.decided[c.id] = d
        self._save_decided()
        for other in self.cells:
            if other.id == c.id:
                other.iterations, other.t_iter = new, t
        self.write_matrices()
        self.say(f"{c.phase.name} {self.describe(c)}: its window was {window:.2f} s, under the {self.args.window:g} s "
                 f"asked: {iterations} -> {new} iterations from now on")

    def _matrix_run(self, path: Path, seconds: float) -> int:
        """`matrix run -m PATH` in this process, stopped by a timer after `seconds` (interrupted, 130)."""
        from runner.cli import app
        argv = ["run", "-m", str(path), "--db", str(self.db), "--workdir", str(self.state / "work")]
        fired = []

        def on_timer(signum: int, frame: Any) -> None:
            fired.append(True)
            raise KeyboardInterrupt

        timed = not math.isinf(seconds) and hasattr(signal, "setitimer")
        old = signal.signal(signal.SIGALRM, on_timer) if timed else None
        if timed:
            signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.5))
        try:
            with self.quiet():
                try:
                    code = app(argv, standalone_mode=False, prog_name="matrix")
                except SystemExit as e:
                    code = e.code
                except KeyboardInterrupt:
                    code = int(Exit.INTERRUPTED)
                except Exception as e:  # click's Abort after an interrupt
                    if type(e).__name__ != "Abort":
                        raise
                    code = int(Exit.INTERRUPTED)
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, old)
        if fired:
            self.stopped = "budget"
            self.say("the budget's deadline stopped the repeat in flight (stored as cancelled; it runs next call)")
            return int(Exit.INTERRUPTED)
        return int(code or 0) if isinstance(code, int) else int(Exit.OK)

    def _row(self, key: str, repeat: int) -> dict[str, Any] | None:
        from runner.store import Store
        with Store(self.db, readonly=True) as store:
            rows = [r for r in store.rows() if r["cell_key"] == key and r["repeat"] == repeat]
        return rows[-1] if rows else None


def main(argv: Sequence[str] | None = None) -> int:
    from runner.errors import MatrixError
    args = options(argv)
    try:
        return Kit(args).run()
    except MatrixError as e:
        print(f"gpu_evidence: error: {e}", file=sys.stderr)
        return int(e.exit_code)
