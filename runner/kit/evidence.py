"""The kit's run: measure the phases in priority order (the headline first), each repeat through `matrix run` on
the local backend into the kit's own store, within a time budget; pack the state after every repeat and before
the report, so that the next call, on a fresh machine, resumes from the pack.

    python3 scripts/gpu_evidence.py [--budget 540] [--pack FILE] [--only PHASE] [--plan] [--dry-run]

Nothing measured is measured again: a repeat stored as a measurement admission admits, or as an outcome
(unsupported, skipped), is not run again; one admission sets aside (diverged, refused: a window shorter than asked)
or that failed is run again, as `matrix run --rerun-failed` runs it (to_run). A cell's window is
sized by its own first repeat (`iterations: auto`: that process times its warm-up, just before the repeats, and
the store keeps the count for every later repeat; a first repeat that fails leaves the next one to size it). The
budget is respected two ways: a repeat whose estimated time does not fit in what is left is not started, and a
timer stops the one in flight at the deadline (it is stored `cancelled` and runs again next time). A state
belongs to one device (runner/kit/device.py).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import signal
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from runner import analysis as an
from runner.base import safewrite
from runner.base.exitcodes import Exit
from runner.domain.outcomes import RERUN_FAILED, Status
from runner.kit import device, gpu_tests, output, plan_text, reference
from runner.kit import plan as plans
from runner.kit.calls import Call, Deferred, cut
from runner.kit.settings import Budget, KitCell, options

GPU_ENV, DRY_ENV = "local-gpu", "dry-run-cpu"
MIN_ITERATIONS = {"cuda": 5, "cpu": 2}
MAX_ITERATIONS = 100_000
WINDOW_MARGIN = 1.1     # the window asked of bench: a little above --window (its count is rounded up anyway)


class Kit:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state: Path = args.state
        self.db = self.state / "store.db"
        self.log_path = self.state / "kit.log"
        self.env_name = DRY_ENV if args.dry_run else GPU_ENV
        self.budget = Budget(args.budget, args.reserve)
        self.data_dir = self.state / "cache" / "jpeg-images"
        self.phases = plans.build(args.repeats, args.dry_run, args.device, self.rel(self.data_dir))
        self.selected = [p.name for p in plans.select(self.phases, args.only)]
        self.cells = [KitCell(phase, dict(params), dict(label), plans.cell_id(params))
                      for phase in self.phases for params, label in zip(phase.cells, phase.labels, strict=True)]
        self.device: dict[str, Any] = {}
        self.stopped = ""
        self._walls: dict[str, list[float]] | None = None

    # --- files -------------------------------------------------------------------------------------
    def rel(self, path: Path) -> str:
        """A path as cells name it: relative to the working directory when inside it (keys stay the same
        wherever the checkout lies), else absolute."""
        try:
            return str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path.resolve())

    def say(self, text: str) -> None:
        line = f"[gpu-evidence {time.strftime('%H:%M:%S')}] {text}"
        print(line, flush=True)
        self.state.mkdir(parents=True, exist_ok=True)
        with safewrite.appending(self.log_path) as f:
            f.write(line + "\n")

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """matrix run's own output goes to the kit's log; the kit prints one line per repeat."""
        with safewrite.appending(self.log_path) as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
            yield

    # --- the steps ---------------------------------------------------------------------------------
    def run(self) -> int:
        if self.args.plan or self.args.report_only:
            self.device = device.kept(self.state) or (device.DRY_RUN if self.args.dry_run else {})
            self.write_matrices()
            if self.args.plan:
                self.print_plan()
                return int(Exit.OK)
            output.report(self)
            output.pack(self)
            return int(Exit.OK)
        found = device.DRY_RUN if self.args.dry_run else device.identify(reference.pythonpath())
        self.device = device.bind(self.state, found)
        caches = compile_caches(self.state)
        files = [f for f in caches.rglob("*") if f.is_file()] if caches.exists() else []
        self.say(f"torch.compile caches: {len(files)} files ({sum(f.stat().st_size for f in files) / 2**20:.1f} MiB) "
                 f"carried in the state{'' if files else ': none yet, compiled cells compile from scratch'}")
        self.say(f"state {self.state} of {device.text(self.device)}; measuring {', '.join(self.selected)}"
                 f"{' (dry run)' if self.args.dry_run else ''}; {self.budget.text()}")
        fp8_phases = [p for p in ("gpt2-first", "gpt2-124m", "fp8-by-size") if p in self.selected]
        if fp8_phases and not self.args.dry_run and importlib.util.find_spec("torchao") is None:
            self.say("torchao missing (no .whl/torchao-*.whl: scripts/gpu_evidence_wheels.py): the fp8 cells of "
                     f"{', '.join(fp8_phases)} are stored unsupported")
        if "wrn-apex-levels" in self.selected:
            from runner.kit.images import make_image_folder
            made = make_image_folder(self.data_dir, per_class=8 if self.args.dry_run else 260)
            if made:
                self.say(f"wrote {made} JPEG images under {self.rel(self.data_dir)}")
        self.write_matrices()
        self.print_plan()
        output.pack(self, quiet=True)
        try:
            self.measure()
        except KeyboardInterrupt:
            self.stopped = self.stopped or "interrupted"
        output.pack(self)  # before the report: a report that fails or a call killed now loses nothing
        if not self.args.no_report and output.report(self):
            output.pack(self)
        return self.conclude()

    def conclude(self) -> int:
        if self.stopped == "interrupted":
            return int(Exit.INTERRUPTED)
        asked, whole = self.missing(self.selected), self.missing()
        if asked:
            self.say(f"NOT complete: {len(asked)} repeats left (~{self.estimate_left(self.selected):.0f} s); run "
                     "the same command again to continue")
            return int(Exit.NOT_MEASURED)
        if whole:
            per = self.left_per_phase()
            self.say("the phases asked for are stored; the plan still misses "
                     + ", ".join(f"{k} ({v} repeats)" for k, v in per.items())
                     + f" (~{self.estimate_left():.0f} s): run without --only to measure them")
            return int(Exit.OK)
        self.say("complete: every repeat of the plan is stored")
        return int(Exit.OK)

    def matrix_text(self, c: KitCell, repeats: int) -> str:
        dev = self.args.device
        dry = self.args.dry_run
        compiled = 0.0 if dry else plans.compile_allowance(c.params)
        window, most = plans.limits(c.params, self.args.window, self.args.warmup_seconds, compiled)
        doc = {"name": "gpu-evidence", "description": c.phase.title,
               "environments": [{"name": self.env_name, "backend": "local"}],
               "axes": {k: [v] for k, v in c.params.items()},
               "run": {"iterations": {"min_time": round(window * WINDOW_MARGIN, 4),
                                      "min": MIN_ITERATIONS[dev], "max": MAX_ITERATIONS},
                       "warmup": {"min": 2 if dry else 5, "max": 50 if dry else 2000,
                                  "max_time": most, "window": 2 if dry else 5},
                       "repeats": repeats, "timeout": max(300, math.ceil(10 * self.repeat_estimate(c))), "seed": 0}}
        return yaml.safe_dump(doc, sort_keys=False)

    def write_matrices(self) -> None:
        from runner import matrix
        folder = self.state / "matrices"
        folder.mkdir(parents=True, exist_ok=True)
        for c in self.cells:
            if c.phase.tests:
                continue  # pytest's step, not a matrix
            c.path = folder / f"{c.id}.yaml"
            safewrite.write_text(c.path, self.matrix_text(c, c.phase.repeats))
            cells = matrix.load(c.path).cells()
            assert len(cells) == 1, c.path
            c.key = cells[0].key

    # --- what is stored, what is left, and how long it takes ---------------------------------------------
    def stored(self) -> dict[tuple[str, int], str]:
        """Each stored repeat's status as admission sees it (runner/record/admission.py): a stored ok whose loss
        went NaN is diverged, one whose window was shorter than asked refused, as `matrix run --rerun-failed`,
        the frame and the page see them."""
        from runner.store import Store
        if not self.db.exists():
            return {}
        with Store(self.db, readonly=True) as store:
            rows = an.admitted(store.rows(keys=[c.key for c in self.cells if c.key]))
        return {(r.cell_key, r.number): r.status for r in rows}

    def missing(self, phases: Sequence[str] | None = None) -> list[tuple[KitCell, int]]:
        """(cell, repeat) to run, in plan order, each once (a cell may be in several phases): not stored yet, or
        stored but not measured (to_run: admission set it aside, or it failed)."""
        stored = self.stored()
        out: list[tuple[KitCell, int]] = []
        seen: set[tuple[str, int]] = set()
        for c in self.cells:
            if phases is not None and c.phase.name not in phases:
                continue
            if c.phase.tests:
                out.extend([(c, 0)] if not gpu_tests.done(self.state) else [])
                continue
            if c.phase.reference:
                if not reference.reference_path(self, c).exists():
                    out.extend((c, r) for r in c.phase.wanted())
                continue
            for r in c.phase.wanted():
                if (c.key, r) not in seen and to_run(stored.get((c.key, r))):
                    seen.add((c.key, r))
                    out.append((c, r))
        return out

    def left_per_phase(self) -> dict[str, int]:
        per: dict[str, int] = {}
        for c, _ in self.missing():
            per[c.phase.name] = per.get(c.phase.name, 0) + 1
        return per

    def walls(self) -> dict[str, list[float]]:
        """Each cell's stored repeats' wall times (seconds), by key."""
        if self._walls is None:
            from runner.store import Store
            self._walls = {}
            if self.db.exists():
                with Store(self.db, readonly=True) as store:
                    for r in store.rows():
                        if r.started_at and r.finished_at and r.status != "cancelled":
                            self._walls.setdefault(r.cell_key, []).append(r.finished_at - r.started_at)
        return self._walls

    def repeat_estimate(self, c: KitCell, repeat: int = 0) -> float:
        """Its stored repeats' median wall time, else the plan's model (runner/kit/plan.py guess_seconds; a
        repeat after the first compiles with warm caches)."""
        seen = self.walls().get(c.key)
        if seen:
            return float(statistics.median(seen))
        return plans.guess_seconds(c.params, self.args.window, self.args.warmup_seconds, later=repeat > 0)

    def cost(self, c: KitCell, r: int) -> float:
        """A missing repeat's seconds, as `--plan` and the budget's checks count it: a reference repeat is two
        processes (bench and the hand-written loop, each its own start-up and fixed window: plans.REFERENCE_PROCESS_S,
        the kit keeps no time of its own for them); the GPU tests their budget; any other its cell's estimate."""
        if c.phase.tests:
            return plans.GPU_TESTS_S
        if c.phase.reference:
            return 2 * plans.REFERENCE_PROCESS_S["cpu" if c.params.get("device") == "cpu" else "cuda"]
        return self.repeat_estimate(c, r)

    def estimate_left(self, phases: Sequence[str] | None = None) -> float:
        return sum(self.cost(c, r) for c, r in self.missing(phases))

    def print_plan(self) -> None:
        """The first call row by row, each row's goal; then each phase and the later calls (runner/kit/plan_text.py)."""
        plan_text.print_plan(self, self.phases, self.selected, self.calls)

    def calls(self, todo: Sequence[tuple[KitCell, int]]) -> tuple[list[Call], dict[str, Deferred]]:
        """The repeats cut into calls as measure() takes them, by the same estimates (cost): runner/kit/calls.py."""
        return cut(todo, self.cost)

    # --- measuring ---------------------------------------------------------------------------------
    def measure(self) -> None:
        """Each selected phase in order; one that does not fit what is left of the budget (an all-or-nothing phase as a
        whole, any other from its next repeat on) waits for the next call, and the next phase is tried: a later
        phase's shorter repeats may fit (`--plan`'s calls() counts the same way)."""
        for phase in self.phases:
            if phase.name not in self.selected:
                continue
            self.measure_phase(phase)
            if self.stopped == "interrupted" or self.budget.left() <= 0:
                return

    def measure_phase(self, phase: plans.Phase) -> None:
        cells = [c for c in self.cells if c.phase is phase]
        if phase.tests:
            gpu_tests.run(self, cells[0])
            return
        if phase.reference:
            for c in cells:
                if not reference.run_reference(self, c):
                    return
                output.pack(self, quiet=True)
            return
        if phase.whole:
            need = sum(self.cost(c, r) for c, r in self.missing([phase.name]))
            if need > self.budget.left():
                self.stopped = "budget"
                self.say(f"{phase.name}: measured whole and needs ~{need:.0f} s, {self.budget.text()}: next call")
                return
        for r in phase.wanted():
            for c in cells:
                if not self.catch_up(c, r):
                    return

    def catch_up(self, c: KitCell, r: int) -> bool:
        """Run the cell's repeats up to number r that are not stored (each tried once in this call); False when
        the budget stops the kit."""
        tried: set[int] = set()
        while True:
            stored = self.stored()
            todo = [rr for rr in range(r + 1) if to_run(stored.get((c.key, rr)))]
            if any(rr in tried for rr in todo):
                # Tried in this call and still not measured (set aside again, failed again): `matrix run
                # --rerun-failed` of a later repeat would run it again, so the cell waits for the next call.
                return True
            if not todo:
                return True
            tried.add(todo[0])
            need = self.cost(c, todo[0])  # the plan's estimate of this repeat (a later one's caches are warm)
            if need > self.budget.left():
                self.stopped = "budget"
                self.say(f"{c.phase.name}: the next repeat needs ~{need:.0f} s, {self.budget.text()}: the rest of the "
                         "phase waits for the next call")
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
        """One repeat through `matrix run`, then the pack; False when the budget's timer stopped it."""
        assert c.path is not None
        safewrite.write_text(c.path, self.matrix_text(c, r + 1))
        started = time.monotonic()
        code = self._matrix_run(c.path, self.budget.left())
        took = time.monotonic() - started
        self._walls = None
        row = self._row(c.key, r)
        status = row.status if row else "not stored"
        metrics = row.metrics if row else {}
        words = status
        if status == "ok":
            tel = metrics.get("telemetry") or {}
            defs = metrics.get("definitions") or {}
            unit = (defs.get("throughput") or {}).get("unit") or "img/s"
            per_joule = (defs.get("images_per_joule") or {}).get("unit") or "img/J"
            words = (f"{metrics.get('throughput') or 0:.1f} {unit} over {metrics.get('window_s') or 0:.2f} s"
                     + (f", {metrics['images_per_joule']:.2f} {per_joule}" if metrics.get("images_per_joule") else "")
                     + (", THROTTLED" if tel.get("throttled") else ""))
        elif row and row.reason:
            words += f": {row.reason[:160]}"
        self.say(f"{c.phase.name} repeat {r + 1}/{c.phase.repeats} {self.describe(c)}: {words} "
                 f"({took:.1f} s; {self.budget.text()})")
        output.pack(self, quiet=True)
        if code == Exit.INTERRUPTED:
            self.stopped = self.stopped or "interrupted"
            return False
        return True

    def _matrix_run(self, path: Path, seconds: float) -> int:
        """`matrix run -m PATH` in this process, stopped by a timer after `seconds` (interrupted, 130)."""
        from runner.cli import app
        # --rerun-failed: a repeat admission set aside (diverged, refused) or that failed is measured again, as the
        # kit's own count of what is left says (to_run); every repeat below the one asked is admitted or final.
        argv = ["run", "-m", str(path), "--db", str(self.db), "--workdir", str(self.state / "work"), "--rerun-failed"]
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

    def _row(self, key: str, repeat: int) -> an.Repeat | None:
        from runner.store import Store
        with Store(self.db, readonly=True) as store:
            rows = [r for r in store.rows(keys=[key]) if r.repeat == repeat]
        return an.Repeat.of(rows[-1]) if rows else None  # a stored ok may be diverged or refused


# What the kit measures again: a repeat not stored, interrupted or never started, and one `matrix run
# --rerun-failed` measures again (runner/domain/outcomes.py RERUN_FAILED: failed, oom, diverged, refused, timeout;
# diverged and refused as admission sees a stored ok). Unsupported and skipped are outcomes: measured.
TO_RUN = frozenset({None, Status.NOT_STARTED.value, *(s.value for s in RERUN_FAILED)})


def to_run(status: str | None) -> bool:
    return status in TO_RUN


def compile_caches(state: Path) -> Path:
    """Point torch.compile's caches (inductor's FX graph and autograd caches, Triton's kernels) into the state, for
    every `matrix run` this process starts: the pack carries them to the next machine (runner/kit/output.py), so a
    later call finds its compiled cells' graphs instead of compiling them again. A cache the user set is kept."""
    folder = (state / output.COMPILE_CACHE).resolve()
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(folder / "triton"))
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")
    return folder


def main(argv: Sequence[str] | None = None) -> int:
    from runner.base.errors import MatrixError
    args = options(argv)
    try:
        return Kit(args).run()
    except MatrixError as e:
        print(f"gpu_evidence: error: {e}", file=sys.stderr)
        return int(e.exit_code)
