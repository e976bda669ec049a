"""The `matrix` command line: parse options, call one function per command; one error boundary for all."""

from __future__ import annotations

import math
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer

from runner import matrix as matrix_mod
from runner.base.errors import ConfigError
from runner.cli import boundary
from runner.cli.boundary import Boundary, exits, state
from runner.commands import clean as clean_cmd
from runner.commands import collect as collect_cmd
from runner.commands import diff as diff_cmd
from runner.commands import doctor as doctor_cmd
from runner.commands import load as load_matrix
from runner.commands import ls as ls_cmd
from runner.commands import plan as plan_cmd
from runner.commands import report as report_cmd
from runner.commands import run as run_cmd
from runner.commands import show as show_cmd
from runner.commands import sigterm

# Kept importable from here (tests and older callers): each lives with its command in runner/commands/.
from runner.commands.plan import plan_runs as plan_runs  # noqa: E402
from runner.commands.run import with_image as _with_image  # noqa: E402,F401
from runner.commands.show import note as _show_note  # noqa: E402,F401
from runner.spec.outcomes import RERUN_FAILED_TEXT
from runner.store import DEFAULT_DB

app = typer.Typer(cls=Boundary, add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Benchmark deep-learning training across environments and precisions.")


MatrixOpt = Annotated[Path | None, typer.Option("--matrix", "-m", help="matrix file (default: ./matrix.yaml, "
                                                   "else the embedded quickstart)")]
DbOpt = Annotated[Path, typer.Option("--db", help="SQLite result store", callback=boundary.store_path)]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", help="only these environments (name, tag or backend)")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", help="only cells with KEY=VALUE (repeatable)")]
MaxCellsOpt = Annotated[int, typer.Option("--max-cells", min=1, help="refuse a matrix of more cells than this "
                                          "(a typo in an axis multiplies)")]


@app.callback()
def _global(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show tracebacks and every repeat")] = False
            ) -> None:
    state["verbose"] = verbose


def _done(status: int) -> None:
    """A command's exit status, given to Typer."""
    if status:
        raise typer.Exit(status)


@app.command()
@exits("plan")
def plan(matrix: MatrixOpt = None, env: EnvOpt = None, only: OnlyOpt = None,
         db: DbOpt = DEFAULT_DB, max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Validate the matrix file and list its cells; nothing runs."""
    _done(plan_cmd.main(matrix, env or (), only or (), db, max_cells))


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
                                              "jobs are kept in --db)", callback=boundary.workdir_path)
                           ] = Path("results"),
        max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS,
        ) -> None:
    """Run every repeat that is not stored yet (resume is the default)."""
    _done(run_cmd.main(matrix, db, env or (), only or (), image, gpus, rerun_failed, force, no_wait, workdir, max_cells,
                       state["verbose"]))


@app.command()
@exits("collect")
def collect(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
            workdir: Annotated[Path, typer.Option("--workdir", help="logs; the jobs to gather are found in "
                                                  "--db", callback=boundary.workdir_path)
                               ] = Path("results"),
            max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Gather results of batch jobs submitted earlier (`run --no-wait`); submits and starts nothing
    (repeats of environments that run here are left to `matrix run`)."""
    _done(collect_cmd.main(matrix, db, env or (), only or (), workdir, max_cells, state["verbose"]))


@app.command("ls")
@exits("ls")
def ls(db: DbOpt = DEFAULT_DB,
       imports: Annotated[bool, typer.Option("--imports", help="what the store imported and from where: one row "
                                             "per origin store and file (host, hardware, when, runs, repeats)")]
       = False) -> None:
    """List the runs in the store (--imports: what it imported)."""
    _done(ls_cmd.main(db, imports))


@app.command()
@exits("show")
def show(run_ref: Annotated[str | None, typer.Argument(metavar="RUN", help="run id or prefix "
                                                          "(default: latest: the newest run measured in this store; "
                                                          "the newest import only when every run was imported)",
                                                          callback=boundary.run_ref)] = None,
         db: DbOpt = DEFAULT_DB) -> None:
    """The cells of one run with their statuses and throughput."""
    _done(show_cmd.main(run_ref, db))


UndecidedOpt = Annotated[str | None, typer.Option("--undecided", help="how an undecided verdict counts: error "
                                                   "(exit 5, the default), fail (exit 1) or pass (exit 0; still "
                                                   "said undecided)")]

SIDE_HELP = ("side {side}: environment, tag, backend or run id (this store's repeats; where it has none, the one "
             "machine that measured it); or env:NAME, tag:NAME, backend:KIND, run:ID; NAME@machine:ID for another "
             "machine's; a whole machine: host:NAME (the host a repeat ran on), machine:X (the store id that measured "
             "it, or its hardware, written whole)")


@app.command()
@exits("compare")
def compare(a: Annotated[str, typer.Argument(help=SIDE_HELP.format(side="A"))],
            b: Annotated[str, typer.Argument(help=SIDE_HELP.format(side="B"))],
            db: DbOpt = DEFAULT_DB,
            fmt: Annotated[str | None, typer.Option("--format", help="md, csv or json "
                                                       "(default: a table)")] = None,
            metric: Annotated[str, typer.Option("--metric", help="throughput, iter_time, time, memory, loss, "
                                                "accuracy, energy (images per joule)")] = "throughput",
            min_effect: Annotated[float | None, typer.Option("--min-effect", help="smallest change that counts as "
                                                             "significant (0.02 = 2%; with --fail-on on the same "
                                                             "metric: the gate's threshold)")] = None,
            fail_on: Annotated[list[str] | None, typer.Option("--fail-on", help="exit 1 when B is slower:X%, "
                                                             "faster:X%, uses memory:X% more or energy:X% more per "
                                                             "image than A, beyond X and significant (repeatable)")] = None,
            undecided: UndecidedOpt = None,
            pool: Annotated[bool, typer.Option("--pool", help="pool every definition a side holds for a cell "
                                               "(default: the newest, the others listed)")] = False) -> None:
    """Pair the cells of A and B and say which is faster, by how much, and whether it is significant.

    A side is an environment name, a tag, a backend kind or a run id, or one spelled with its kind:
    env:NAME, tag:NAME, backend:KIND, run:ID, host:NAME (the host a repeat ran on) or machine:X (its
    hardware in words, or the id of the store it was imported from).

    With --fail-on, a regression gate: exit status 1 when a pair changed more than the threshold AND
    significantly, 5 when a pair could not be decided (fewer than 2 ok repeats a side, a metric not
    measured, run settings that differ; --undecided fail|pass counts those otherwise); the output lists
    the pairs that failed or were undecided (in JSON: the `gate` member).
    """
    from runner.commands import decide
    from runner.report import compare_command
    if min_effect is not None and not (math.isfinite(min_effect) and 0 <= min_effect < 1):
        raise ConfigError(f"--min-effect {min_effect}: a fraction from 0 to below 1 (0.02 = 2%)")
    min_effect = decide.one_threshold(metric, min_effect, fail_on or [])
    gate_out, status = "", 0
    if fail_on:
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
    m = load_matrix(matrix, max_cells)
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
                                                 callback=boundary.workdir_path)] = Path("results"),
           max_cells: MaxCellsOpt = matrix_mod.MAX_CELLS) -> None:
    """Find the adjacent pair of environments where the cell's metric changes beyond the threshold, measuring as
    few environments as possible (binary search, repeats added where the answer is not clear yet; every repeat
    is stored, so a second bisect on the same store measures nothing new). A change of status counts too
    (unsupported -> ok). Prints the pair, the change with its interval and p-value, what it measured against a
    full sweep, and what differs between the two environments; a change spread over several steps is said so.
    """
    from runner.commands.bisect import bisect_command
    m = load_matrix(matrix, max_cells)
    signal.signal(signal.SIGTERM, sigterm)
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
    _done(diff_cmd.main(db, a, b, fmt, everything))


@app.command()
@exits("report")
def report(db: DbOpt = DEFAULT_DB,
           run_refs: Annotated[list[str] | None, typer.Option("--run", help="only these runs",
                                                              callback=boundary.run_refs)] = None,
           fmt: Annotated[list[str] | None, typer.Option("--format", help="md, html, csv, json "
                                                            "(repeatable; default: md and html)")] = None,
           out: Annotated[Path | None, typer.Option("--out", help="output folder (default: results/reports/<name>/, "
                                                       "untracked)", callback=boundary.out_path)
                          ] = None) -> None:
    """Write the report views (tables and plots) from the store."""
    _done(report_cmd.main(db, run_refs, fmt or ["md", "html"], out))


@app.command("export")
@exits("export")
def export(out: Annotated[Path, typer.Option("--out", "-o", help="the results file to write (.jsonl.gz)")],
           db: DbOpt = DEFAULT_DB,
           run_refs: Annotated[list[str] | None, typer.Option("--run", help="only these runs (id or prefix; "
                                                              "repeatable)", callback=boundary.run_refs)] = None,
           env: Annotated[list[str] | None, typer.Option("--env", help="only these environments (repeatable)")] = None
           ) -> None:
    """Write the selected repeats, with their cells, environments, log tails and provenance, to one portable file."""
    from runner.commands.export import export_command
    typer.echo(export_command(db, out, run_refs or None, env or None))


@app.command("import")
@exits("import")
def import_(files: Annotated[list[Path], typer.Argument(metavar="FILE", help="results files `matrix export` wrote")],
            db: DbOpt = DEFAULT_DB) -> None:
    """Merge results files into the store: all or nothing; a repeat already there is not stored again."""
    from runner.commands.import_ import import_command
    typer.echo("\n".join(import_command(db, files)))


@app.command("publish")
@exits("publish")
def publish(out: Annotated[Path, typer.Option("--out", "-o", help="the site's folder")],
            db: Annotated[list[Path] | None, typer.Option("--db", help="result stores (repeatable; default "
                                                           "results/matrix.db)")] = None,
            metric: Annotated[str, typer.Option("--metric", help="the metric the histories plot")] = "throughput"
            ) -> None:
    """Write a static site (opens from file://): machines, environments, runs, each cell's history with its changes."""
    from runner.commands.publish import publish_command
    typer.echo(publish_command([boundary.store_path(p) for p in db or [DEFAULT_DB]], out, metric))


@app.command()
@exits("doctor")
def doctor() -> None:
    """What this host offers: Docker engine and GPU runtime, Slurm, GPUs, Python and torch."""
    _done(doctor_cmd.main())


@app.command()
@exits("clean")
def clean(run_ref: Annotated[str | None, typer.Option("--run", help="only this run's leftovers "
                                                         "(id or prefix)", callback=boundary.run_ref)] = None,
          db: DbOpt = DEFAULT_DB) -> None:
    """Remove containers and batch jobs left by interrupted runs."""
    _done(clean_cmd.main(run_ref, db))


def main() -> None:
    """Entry point; errors become one line and their exit status in Boundary. SIGTERM interrupts every command
    as Ctrl-C does (130)."""
    signal.signal(signal.SIGTERM, sigterm)
    app(prog_name="matrix")


if __name__ == "__main__":
    main()
