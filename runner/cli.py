"""The `matrix` command line: parse options, call one function per command; one error boundary for all."""

from __future__ import annotations

import math
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from runner import backends, execute
from runner import console as consoles
from runner import matrix as matrix_mod
from runner.cli_boundary import (
    Boundary,
    _out_path,
    _run_ref,
    _run_refs,
    _store_path,
    _workdir_path,
    exits,
    state,
)
from runner.errors import ConfigError
from runner.report.fmt import Cell, Table
from runner.results import RERUN_FAILED_TEXT
from runner.spec import shown_params
from runner.store import DEFAULT_DB, Store

app = typer.Typer(cls=Boundary, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark deep-learning training across environments and precisions.")


MatrixOpt = Annotated[Path | None, typer.Option("--matrix", "-m", help="matrix file (default: ./matrix.yaml, "
                                                   "else the embedded quickstart)")]
DbOpt = Annotated[Path, typer.Option("--db", help="SQLite result store", callback=_store_path)]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="only these environments (name, tag or backend)")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="only cells with KEY=VALUE (repeatable)")]
MaxCellsOpt = Annotated[int, typer.Option("--max-cells", min=1, help="refuse a matrix of more cells than this "
                                          "(a typo in an axis multiplies)")]


@app.callback()
def _global(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show tracebacks and every repeat")] = False
            ) -> None:
    state["verbose"] = verbose


def _matrix_path(path: Path | None) -> Path | None:
    if path is None and Path("matrix.yaml").exists():
        return Path("matrix.yaml")
    return path


def _load(matrix: Path | None, max_cells: int) -> matrix_mod.Matrix:
    return matrix_mod.load(_matrix_path(matrix), max_cells=max_cells)


@app.command()
@exits("plan")
def plan(matrix: MatrixOpt = None, env: EnvOpt = None, only: OnlyOpt = None,
         db: DbOpt = DEFAULT_DB, max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Validate the matrix file and list its cells; nothing runs."""
    m = _load(matrix, max_cells)
    cells = matrix_mod.select(m.cells(), env or (), only or ())
    stored = {}
    if db.exists():
        with Store(db, readonly=True) as store:
            stored = store.latest_statuses(c.key for c in cells)
    axes = param_columns(cells)
    table = Table(["#", "key", "environment", "backend", *axes, "stored"], align=["r"])
    for i, cell in enumerate(cells, 1):
        done = [stored[(cell.key, r)].value for r in range(m.run.most_repeats) if (cell.key, r) in stored]
        table.add(str(i), cell.key, cell.env_name, cell.environment.backend,
                  *(str(cell.params.get(a, "")) for a in axes), f"{len(done)}/{m.run.repeats_text.split(' ')[0]}")
    consoles.print_table(consoles.stdout(), table, f"{m.name}: {len(cells)} cells x {m.run.repeats_text} repeats "
                         f"({plan_runs(m)}{'; repeats interleaved' if m.run.interleave else ''})")


def plan_runs(m: Any) -> str:
    """What one repeat runs: bench's iterations, or the workload programs (whose own arguments say how long)."""
    if not m.workloads:
        return str(m.run.window_text)
    names = sorted({w.name or "unnamed" for w in m.workloads.values()})
    return f"workload {', '.join(names)}: its own program and parser"


def param_columns(cells: list[Any]) -> list[str]:
    """The axes worth a column: those present in any cell, minus a process layout of 1."""
    return list(dict.fromkeys(k for cell in cells for k in shown_params(cell.params)))


@app.command()
@exits("run")
def run(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
        image: Annotated[str | None, typer.Option("--image", help="run the axes in this one image "
                                                     "(an ad-hoc docker environment)")] = None,
        gpus: Annotated[str | None, typer.Option("--gpus", help="with --image only: all, N or 0,1 (matrix "
                                                    "file environments say `gpus:` themselves)")] = None,
        rerun_failed: Annotated[bool, typer.Option("--rerun-failed", help=f"run {RERUN_FAILED_TEXT} "
                                                   "repeats again")] = False,
        force: Annotated[bool, typer.Option("--force", help="measure every repeat again")] = False,
        no_wait: Annotated[bool, typer.Option("--no-wait", help="batch backends: submit and return")] = False,
        workdir: Annotated[Path, typer.Option("--workdir", help="logs and batch job files (submitted "
                                              "jobs are kept in --db)", callback=_workdir_path)
                           ] = Path("results"),
        max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS,
        ) -> None:
    """Run every repeat that is not stored yet (resume is the default)."""
    if gpus is not None and image is None:
        raise ConfigError(f"--gpus {gpus}: applies to --image only; an environment of the matrix file says its "
                          "own GPUs (`gpus:` of a docker environment, `gpus_per_node:` of a slurm one, the gpus axis)")
    m = _load(matrix, max_cells)
    if image is not None:
        m = _with_image(m, image, gpus)
    _run(m, db, env, only, workdir, rerun_failed=rerun_failed, force=force, wait=not no_wait, submit=True)


@app.command()
@exits("collect")
def collect(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
            workdir: Annotated[Path, typer.Option("--workdir", help="logs; the jobs to gather are found in "
                                                  "--db", callback=_workdir_path)
                               ] = Path("results"),
            max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Gather results of batch jobs submitted earlier (`run --no-wait`); submits and starts nothing
    (repeats of environments that run here are left to `matrix run`)."""
    m = _load(matrix, max_cells)
    _run(m, db, env, only, workdir, submit=False)


def _with_image(m: matrix_mod.Matrix, image: str, gpus: str | None) -> matrix_mod.Matrix:
    from dataclasses import replace

    from runner.backends.docker import adhoc_environment
    axes = m.axes
    if gpus and axes.device == ["cpu"]:
        # GPUs were asked for: a CPU-only device axis (the quickstart's) would leave them idle.
        axes = axes.model_copy(update={"device": ["cuda"]})
    return replace(m, axes=axes, environments=(adhoc_environment(image, gpus),), include=tuple(
        {k: v for k, v in rule.items() if k != "environment"} for rule in m.include),
        exclude=tuple(r for r in m.exclude if "environment" not in r))


def _run(m: matrix_mod.Matrix, db: Path, env: list[str] | None, only: list[str] | None, workdir: Path,
         **kwargs: bool) -> None:
    cells = matrix_mod.select(m.cells(), env or (), only or ())
    signal.signal(signal.SIGTERM, _sigterm)
    from runner.commands import decide
    decided = 0
    with Store(db) as store:
        report = execute.run_matrix(m, cells, store, workdir=workdir, argv=sys.argv[1:],
                                    console=consoles.stdout(), verbose=state["verbose"], **kwargs)
        if not report.interrupted and not report.pending:  # jobs still queued: `matrix collect` decides
            text, decided = decide.run_decisions(m, cells, store)
            if text:
                typer.echo(text, nl=False)
    if report.exit_code:
        raise typer.Exit(int(report.exit_code))
    if decided:
        raise typer.Exit(int(decided))


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@app.command("ls")
@exits("ls")
def ls(db: DbOpt = DEFAULT_DB) -> None:
    """List the runs in the store."""
    from datetime import datetime
    with Store(db, readonly=True) as store:
        runs = store.runs()
    table = Table(["run", "matrix", "started", "took", "status", "repeats"], align=["l"] * 3 + ["r"])
    for r in runs:
        took = f"{r.finished_at - r.started_at:.0f} s" if r.finished_at else "-"
        counts = ", ".join(f"{n} {s}" for s, n in sorted(r.counts.items())) or "none"
        table.add(r.run_id, r.matrix_name or "-", datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M"),
                  took, Cell(r.status, "" if r.status == "complete" else "status"), counts)
    consoles.print_table(consoles.stdout(), table, f"runs in {db}")


@app.command()
@exits("show")
def show(run_ref: Annotated[str | None, typer.Argument(metavar="RUN", help="run id or prefix "
                                                          "(default: latest)", callback=_run_ref)] = None,
         db: DbOpt = DEFAULT_DB) -> None:
    """The cells of one run with their statuses and throughput."""
    with Store(db, readonly=True) as store:
        run_id = store.resolve_run(run_ref)
        rows = list(store.rows([run_id], latest_only=False))
    axes = list(dict.fromkeys(k for r in rows for k in shown_params(r["params"])))
    table = Table(["cell", "environment", *axes, "repeat", "status", "img/s", "note"],
                  align=["l"] * (2 + len(axes)) + ["r", "l", "r"])
    for r in rows:
        tput = (r["metrics"] or {}).get("throughput")
        table.add(r["cell_key"], r["environment"], *(str(r["params"].get(a, "")) for a in axes),
                  str(r["repeat"] + 1), Cell(r["status"], "" if r["status"] == "ok" else "status"),
                  f"{tput:.1f}" if isinstance(tput, int | float) else "-", _show_note(r))
    consoles.print_table(consoles.stdout(), table, f"run {run_id}: {len(rows)} repeats")


def _show_note(row: dict[str, Any]) -> Cell:
    """`matrix show`'s note: why a repeat did not end ok, whether the GPU throttled in its window, or that its
    warm-up reached a ceiling before it was steady (flagged as a noisy cell is in the report)."""
    metrics = row["metrics"] if isinstance(row["metrics"], dict) else {}
    notes = []
    telemetry = metrics.get("telemetry")
    if isinstance(telemetry, dict) and telemetry.get("throttled") is True:
        notes.append("throttled: " + str(telemetry.get("throttle_reason") or ""))
    if row["status"] != "ok":
        notes.append(str(row["reason"] or ""))
    else:
        warm = metrics.get("warmup")
        if isinstance(warm, dict) and warm.get("steady") is False:
            notes.append(f"warm-up not steady: stopped at its {'time ' if warm.get('how') == 'max_time' else ''}"
                         f"ceiling after {warm.get('iterations')} iteration{'' if warm.get('iterations') == 1 else 's'}")
    text = "; ".join(n for n in notes if n)[:70]
    return Cell(text, "status" if notes and row["status"] == "ok" else "muted")


UndecidedOpt = Annotated[str | None, typer.Option("--undecided", help="how an undecided verdict counts: error "
                                                   "(exit 5, the default), fail (exit 1) or pass (exit 0; still "
                                                   "said undecided)")]


@app.command()
@exits("compare")
def compare(a: Annotated[str, typer.Argument(help="side A: environment, tag, backend or run id")],
            b: Annotated[str, typer.Argument(help="side B: environment, tag, backend or run id")],
            db: DbOpt = DEFAULT_DB,
            fmt: Annotated[str | None, typer.Option("--format", help="md, csv or json "
                                                       "(default: a table)")] = None,
            metric: Annotated[str, typer.Option("--metric", help="throughput, iter_time, time, memory, loss, "
                                                "accuracy, energy (images per joule)")] = "throughput",
            min_effect: Annotated[float, typer.Option("--min-effect", help="smallest change that counts as "
                                                      "significant (0.02 = 2%)")] = 0.02,
            fail_on: Annotated[list[str] | None, typer.Option("--fail-on", help="exit 1 when B is slower:X%, "
                                                             "faster:X%, uses memory:X% more or energy:X% more per "
                                                             "image than A, beyond X and significant (repeatable)")] = None,
            undecided: UndecidedOpt = None,
            pool: Annotated[bool, typer.Option("--pool", help="pool every definition a side holds for a cell "
                                               "(default: the newest, the others listed)")] = False) -> None:
    """Pair the cells of A and B and say which is faster, by how much, and whether it is significant.

    With --fail-on, a regression gate: exit status 1 when a pair changed more than the threshold AND
    significantly, 5 when a pair could not be decided (fewer than 2 ok repeats a side, a metric not
    measured, run settings that differ; --undecided fail|pass counts those otherwise); the output lists
    the pairs that failed or were undecided (in JSON: the `gate` member).
    """
    from runner.report import compare_command
    if not (math.isfinite(min_effect) and 0 <= min_effect < 1):
        raise ConfigError(f"--min-effect {min_effect}: a fraction from 0 to below 1 (0.02 = 2%)")
    gate_out, status = "", 0
    if fail_on:
        from runner.commands import decide
        gate_out, status = decide.gate_command(db, a, b, fail_on, fmt, undecided, pool)
    elif undecided is not None:
        raise ConfigError("--undecided applies to the gate: add --fail-on (e.g. --fail-on slower:3%)")
    text = compare_command(db, a, b, fmt, metric, min_effect=min_effect, pool=pool)
    if gate_out:
        if fmt == "csv":
            typer.echo(gate_out, err=True, nl=False)
        text = decide.with_gate(text, gate_out, fmt)
    if text:
        typer.echo(text, nl=not text.endswith("\n"))
    if status:
        raise typer.Exit(status)


@app.command()
@exits("check")
def check(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
          fmt: Annotated[str | None, typer.Option("--format", help="json (default: a table)")] = None,
          undecided: UndecidedOpt = None, max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Hold the stored results against the matrix file's `references:`; runs nothing.

    Per cell and metric: pass, fail or undecided, with the measured mean, the reference and the margin.
    A reference fails when a cell it covers has no value because its repeats failed; it is undecided when
    nothing was measured or the metric is not measured there, unless --undecided (or the entry's
    `undecided:`) counts it as fail or pass.
    """
    from runner.commands import decide
    m = _load(matrix, max_cells)
    cells = matrix_mod.select(m.cells(), env or (), only or ())
    text, status = decide.check_command(m, cells, db, fmt, undecided)
    typer.echo(text, nl=not text.endswith("\n"))
    if status:
        raise typer.Exit(status)


@app.command()
@exits("bisect")
def bisect(environments: Annotated[list[str] | None, typer.Argument(
               metavar="[ENVIRONMENTS]...", help="environments of the matrix file, in order (default: all of them, "
               "in the file's order)")] = None,
           matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, only: OnlyOpt = None,
           images: Annotated[list[str] | None, typer.Option("--images", help="image pattern instead of names, e.g. "
                                                            "'nvcr.io/nvidia/pytorch:{24.01..25.09}-py3' (year.month), "
                                                            "'img:v{1..12}', 'img:{a,b,c}'; repeatable, in order")] = None,
           template: Annotated[str | None, typer.Option("--template", help="with --images: the environment of the "
                                                        "matrix file to copy (its image replaced); default: as "
                                                        "`run --image`")] = None,
           gpus: Annotated[str | None, typer.Option("--gpus", help="with --images and no template: all, N or 0,1")
                           ] = None,
           metric: Annotated[str, typer.Option("--metric", help="throughput, iter_time, time, memory, loss, accuracy, "
                                               "or status (only how the repeats ended)")] = "throughput",
           threshold: Annotated[str, typer.Option("--threshold", help="smallest change that counts, e.g. 10%")
                                ] = "5%",
           max_repeats: Annotated[int | None, typer.Option("--max-repeats", help="most repeats an environment gets "
                                                           "while a pair is undecided (default 10)")] = None,
           fmt: Annotated[str | None, typer.Option("--format", help="md or json (default: tables)")] = None,
           workdir: Annotated[Path, typer.Option("--workdir", help="logs and batch job files",
                                                 callback=_workdir_path)] = Path("results"),
           max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Find the adjacent pair of environments where the cell's metric changes beyond the threshold, measuring as
    few environments as possible (binary search, repeats added where the answer is not clear yet; every repeat
    is stored, so a second bisect on the same store measures nothing new). A change of status counts too
    (unsupported -> ok). Prints the pair, the change with its interval and p-value, what it measured against a
    full sweep, and what differs between the two environments; a change spread over several steps is said so.
    """
    from runner.commands.bisect import bisect_command
    m = _load(matrix, max_cells)
    signal.signal(signal.SIGTERM, _sigterm)
    text, status = bisect_command(m, db, environments or (), images or (), template, gpus, only or (), metric,
                                  threshold, max_repeats, fmt, workdir, sys.argv[1:], state["verbose"])
    typer.echo(text, nl=not text.endswith("\n"))
    if status:
        raise typer.Exit(status)


@app.command("diff")
@exits("diff")
def diff(a: Annotated[str, typer.Argument(help="environment A (a name in the store)")],
         b: Annotated[str, typer.Argument(help="environment B")],
         db: DbOpt = DEFAULT_DB,
         fmt: Annotated[str | None, typer.Option("--format", help="md or json (default: tables)")] = None,
         everything: Annotated[bool, typer.Option("--all", help="also what is the same, and every package")
                               ] = False) -> None:
    """What differs between two environments, as their newest repeats recorded it: PyTorch, CUDA, cuDNN, NCCL,
    Python, numpy, the OS, the image, the hardware, the variables that steer the libraries, torch's build, how
    each precision ran, and the Python and system packages."""
    from runner.report.diff import diff_command
    text = diff_command(db, a, b, fmt, everything)
    typer.echo(text, nl=not text.endswith("\n"))


@app.command()
@exits("report")
def report(db: DbOpt = DEFAULT_DB,
           run_refs: Annotated[list[str] | None, typer.Option("--run", help="only these runs",
                                                              callback=_run_refs)] = None,
           fmt: Annotated[list[str] | None, typer.Option("--format", help="md, html, csv, json "
                                                            "(repeatable; default: md and html)")] = None,
           out: Annotated[Path | None, typer.Option("--out", help="output folder (default: results/reports/<name>/, "
                                                       "untracked)", callback=_out_path)
                          ] = None) -> None:
    """Write the report views (tables and plots) from the store."""
    from runner.report import report_command
    for path in report_command(db, run_refs or None, fmt or ["md", "html"], out):
        typer.echo(str(path))


@app.command()
@exits("doctor")
def doctor() -> None:
    """What this host offers: Docker engine and GPU runtime, Slurm, GPUs, Python and torch."""
    table = Table(["backend", "check", "", "detail"])
    marks = {True: Cell("ok", "good"), False: Cell("missing", "bad"), None: Cell("n/a", "muted")}
    for kind in backends.kinds():
        for check in backends.get(kind).doctor():
            table.add(kind, check.name, marks[check.ok], check.detail)
    consoles.print_table(consoles.stdout(), table, "matrix doctor")


@app.command()
@exits("clean")
def clean(run_ref: Annotated[str | None, typer.Option("--run", help="only this run's leftovers "
                                                         "(id or prefix)", callback=_run_ref)] = None,
          db: DbOpt = DEFAULT_DB) -> None:
    """Remove containers and batch jobs left by interrupted runs."""
    if run_ref and db.exists():
        with Store(db, readonly=True) as store:
            run_ref = store.resolve_run(run_ref)
    removed = [f"{kind}: {item}" for kind in backends.kinds() for item in backends.get(kind).clean(run_ref)]
    typer.echo("\n".join(["removed:", *removed]) if removed else "nothing to clean")


def main() -> None:
    """Entry point; errors become one line and their exit status in Boundary. SIGTERM interrupts every command
    as Ctrl-C does (130)."""
    signal.signal(signal.SIGTERM, _sigterm)
    app(prog_name="matrix")


if __name__ == "__main__":
    main()
