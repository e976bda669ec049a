"""The `matrix` command line: declares each command's options and hands their values to the command registered
under its name (runner/commands/base.py: `run(option values) -> exit status`); one error boundary for all
(runner/cli/boundary.py); what the shell completes for a value (runner/cli/complete.py). No logic and no formatting
here: what a command does and says is its module's."""


import signal
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from runner.cli import boundary, coercion, complete
from runner.cli.boundary import Boundary, state
from runner.commands import (
    COMPARE_FORMATS,
    DEFAULT_DB,
    DIFF_FORMATS,
    HEADLINE,
    MAX_CELLS,
    RERUN_FAILED_TEXT,
    metric_help,
    one_of,
    report_format_help,
    rules_help,
    sigterm,
    site_metric_help,
)
from runner.commands import bisect as bisect_command
from runner.commands import check as check_command
from runner.commands.base import COMMANDS, call

coercion.install()  # a string option's value without pydantic (runner/cli/coercion.py)
app = typer.Typer(cls=Boundary, no_args_is_help=True, pretty_exceptions_enable=False, rich_markup_mode=None,
                  context_settings={"max_content_width": 200},
                  help="Benchmark deep-learning training across environments and precisions.")
F = TypeVar("F", bound=Callable[..., Any])


def command(name: str) -> Callable[[F], F]:
    """Declare a function's parameters as the options of the registered command `name`: the app's command of that
    name, whose --help is the command's (its help, details and exit statuses)."""
    cmd = COMMANDS.get(name)
    return app.command(name, cls=boundary.ReadableCommand, help=cmd.help_page(), short_help=cmd.short_help())


def _done(status: int) -> None:
    """A command's exit status, given to Typer."""
    if status:
        raise typer.Exit(status)


MatrixOpt = Annotated[Path | None, typer.Option("--matrix", "-m", metavar="FILE", envvar="MATRIX_FILE",
                                                   help="matrix file (default: ./matrix.yaml, else the embedded "
                                                   "quickstart)")]
DbOpt = Annotated[Path, typer.Option("--db", metavar="FILE", envvar="MATRIX_DB", help="SQLite result store",
                                     callback=boundary.store_path)]
EnvOpt = Annotated[list[str] | None, typer.Option("--env", metavar="NAME", autocompletion=complete.backends,
                                                  help="only these environments (name, tag or backend)")]
OnlyOpt = Annotated[list[str] | None, typer.Option("--only", metavar="KEY=VALUE", autocompletion=complete.only,
                                                   help="only cells with KEY=VALUE (repeatable)")]
MaxCellsOpt = Annotated[int, typer.Option("--max-cells", metavar="N", min=1, help="refuse a matrix of more cells than "
                                          "this (a typo in an axis multiplies)")]
UndecidedOpt = Annotated[str | None, typer.Option("--undecided", metavar="error|fail|pass",
                                                   autocompletion=complete.undecided,
                                                   help="how an undecided verdict counts: error "
                                                   "(exit 5, the default), fail (exit 1) or pass (exit 0; still "
                                                   "said undecided)")]
SIDE_HELP = ("side {side}: environment, tag, backend or run id (this store's repeats; where it has none, the one "
             "machine that measured it); or env:NAME, tag:NAME, backend:KIND, run:ID; NAME@machine:ID for another "
             "machine's; a whole machine: host:NAME (the host a repeat ran on), machine:X (the store id that measured "
             "it, or its hardware, written whole)")


@app.callback()
def _global(verbose: Annotated[bool, typer.Option("--verbose", "-v", help="show tracebacks and every repeat")] = False
            ) -> None:
    state["verbose"] = verbose


@command("plan")
def plan(matrix: MatrixOpt = None, env: EnvOpt = None, only: OnlyOpt = None,
         db: DbOpt = DEFAULT_DB, max_cells: MaxCellsOpt = MAX_CELLS) -> None:
    _done(call("plan", matrix=matrix, env=env, only=only, db=db, max_cells=max_cells))


@command("run")
def run(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
        image: Annotated[str | None, typer.Option("--image", metavar="IMAGE", help="run the axes in this one "
                                                     "image (an ad-hoc docker environment)")] = None,
        gpus: Annotated[str | None, typer.Option("--gpus", metavar="all|N|0,1", help="with --image only: all, N or "
                                                    "0,1 (matrix file environments say `gpus:` themselves)")] = None,
        rerun_failed: Annotated[bool, typer.Option("--rerun-failed", help=f"run {RERUN_FAILED_TEXT} "
                                                   "repeats again")] = False,
        force: Annotated[bool, typer.Option("--force", help="measure every repeat again")] = False,
        until_decided: Annotated[bool, typer.Option("--until-decided", help="add repeats to the cells whose checks "
                                                    "(the file's gate: and references:) are undecided, until "
                                                    "each is decided or --max-repeats")] = False,
        max_repeats: Annotated[int | None, typer.Option("--max-repeats", min=2, metavar="N", help="with --until-decided: the "
                                                        "most repeats a cell gets (default: the file's "
                                                        "repeats.max, else 20)")] = None,
        no_wait: Annotated[bool, typer.Option("--no-wait", help="batch backends: submit and return")] = False,
        workdir: Annotated[Path, typer.Option("--workdir", metavar="DIR", help="logs and batch job files "
                                              "(submitted jobs are kept in --db)", callback=boundary.workdir_path)
                           ] = Path("results"),
        max_cells: MaxCellsOpt = MAX_CELLS,
        ) -> None:
    _done(call("run", matrix=matrix, db=db, env=env, only=only, image=image, gpus=gpus, rerun_failed=rerun_failed,
               force=force, until_decided=until_decided, max_repeats=max_repeats, no_wait=no_wait, workdir=workdir,
               max_cells=max_cells, verbose=state["verbose"]))


@command("collect")
def collect(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
            workdir: Annotated[Path, typer.Option("--workdir", metavar="DIR", help="logs; the jobs to gather are "
                                                  "found in --db", callback=boundary.workdir_path)
                               ] = Path("results"),
            max_cells: MaxCellsOpt = MAX_CELLS) -> None:
    _done(call("collect", matrix=matrix, db=db, env=env, only=only, workdir=workdir, max_cells=max_cells,
               verbose=state["verbose"]))


@command("ls")
def ls(db: DbOpt = DEFAULT_DB,
       imports: Annotated[bool, typer.Option("--imports", help="what the store imported and from where: one row "
                                             "per origin store and file (host, hardware, when, runs, repeats)")]
       = False) -> None:
    _done(call("ls", db=db, imports=imports))


@command("show")
def show(run_ref: Annotated[str | None, typer.Argument(metavar="RUN", help="run id or prefix "
                                                          "(default: latest: the newest run measured in this store; "
                                                          "the newest import only when every run was imported)",
                                                          callback=boundary.run_ref)] = None,
         db: DbOpt = DEFAULT_DB) -> None:
    _done(call("show", run_ref=run_ref, db=db))


@command("compare")
def compare(a: Annotated[str, typer.Argument(metavar="A", autocompletion=complete.sides,
                                             help=SIDE_HELP.format(side="A"))],
            b: Annotated[str, typer.Argument(metavar="B", autocompletion=complete.sides,
                                             help=SIDE_HELP.format(side="B"))],
            db: DbOpt = DEFAULT_DB,
            fmt: Annotated[str | None, typer.Option("--format", metavar="FORMAT",
                                                    autocompletion=complete.compare_formats,
                                                    help=f"{one_of(COMPARE_FORMATS)} (default: a table)")] = None,
            metric: Annotated[str, typer.Option("--metric", metavar="METRIC", autocompletion=complete.metrics,
                                                help=metric_help())] = HEADLINE,
            min_effect: Annotated[float | None, typer.Option("--min-effect", metavar="X", help="smallest change that "
                                                             "counts as significant (0.02 = 2%; with --fail-on on "
                                                             "the same metric: the gate's threshold)")] = None,
            fail_on: Annotated[list[str] | None, typer.Option("--fail-on", metavar="RULE:X%",
                                                             autocompletion=complete.fail_on,
                                                             help=rules_help())] = None,
            undecided: UndecidedOpt = None,
            pool: Annotated[bool, typer.Option("--pool", help="pool every definition a side holds for a cell "
                                               "(default: the newest, the others listed)")] = False) -> None:
    _done(call("compare", a=a, b=b, db=db, fmt=fmt, metric=metric, min_effect=min_effect, fail_on=fail_on,
               undecided=undecided, pool=pool))


@command("check")
def check(matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, env: EnvOpt = None, only: OnlyOpt = None,
          fmt: Annotated[str | None, typer.Option("--format", metavar="FORMAT",
                                                  autocompletion=complete.check_formats,
                                                  help=f"{one_of(check_command.FORMATS)} (default: a table)")] = None,
          undecided: UndecidedOpt = None, max_cells: MaxCellsOpt = MAX_CELLS) -> None:
    _done(call("check", matrix=matrix, db=db, env=env, only=only, fmt=fmt, undecided=undecided,
               max_cells=max_cells))


@command("bisect")
def bisect(environments: Annotated[list[str] | None, typer.Argument(
               metavar="[ENVIRONMENTS]...", help="environments of the matrix file, in order (default: all of them, "
               "in the file's order)")] = None,
           matrix: MatrixOpt = None, db: DbOpt = DEFAULT_DB, only: OnlyOpt = None,
           images: Annotated[list[str] | None, typer.Option("--images", metavar="PATTERN", help="image pattern "
                                                            "instead of names, e.g. "
                                                            "'nvcr.io/nvidia/pytorch:{24.01..25.09}-py3' (year.month), "
                                                            "'img:v{1..12}', 'img:{a,b,c}'; repeatable, in order")] = None,
           template: Annotated[str | None, typer.Option("--template", metavar="ENVIRONMENT", help="with --images: the "
                                                        "environment of the matrix file to copy (its image replaced); "
                                                        "default: as `run --image`")] = None,
           gpus: Annotated[str | None, typer.Option("--gpus", metavar="all|N|0,1", help="with --images and no "
                                                    "template: all, N or 0,1")] = None,
           metric: Annotated[str, typer.Option("--metric", metavar="METRIC", autocompletion=complete.bisect_metrics,
                                               help=metric_help(f", or {bisect_command.STATUS} (only how the "
                                                                "repeats ended)"))] = HEADLINE,
           threshold: Annotated[str, typer.Option("--threshold", metavar="X%", help="smallest change that counts, "
                                                  "e.g. 10%")] = "5%",
           max_repeats: Annotated[int | None, typer.Option("--max-repeats", metavar="N", help="most repeats an "
                                                           "environment gets while a pair is undecided (default 10)")
                                  ] = None,
           fmt: Annotated[str | None, typer.Option("--format", metavar="FORMAT", autocompletion=complete.diff_formats,
                                                  help=f"{one_of(bisect_command.FORMATS)} (default: tables)")] = None,
           workdir: Annotated[Path, typer.Option("--workdir", metavar="DIR", help="logs and batch job files",
                                                 callback=boundary.workdir_path)] = Path("results"),
           max_cells: MaxCellsOpt = MAX_CELLS) -> None:
    _done(call("bisect", environments=environments, matrix=matrix, db=db, only=only, images=images,
               template=template, gpus=gpus, metric=metric, threshold=threshold, max_repeats=max_repeats, fmt=fmt,
               workdir=workdir, max_cells=max_cells, verbose=state["verbose"]))


@command("diff")
def diff(a: Annotated[str, typer.Argument(metavar="A", help="environment A (a name in the store)")],
         b: Annotated[str, typer.Argument(metavar="B", help="environment B")],
         db: DbOpt = DEFAULT_DB,
         fmt: Annotated[str | None, typer.Option("--format", metavar="FORMAT", autocompletion=complete.diff_formats,
                                                  help=f"{one_of(DIFF_FORMATS)} (default: tables)")] = None,
         everything: Annotated[bool, typer.Option("--all", help="also what is the same, and every package")
                               ] = False) -> None:
    _done(call("diff", a=a, b=b, db=db, fmt=fmt, everything=everything))


@command("report")
def report(db: DbOpt = DEFAULT_DB,
           run_refs: Annotated[list[str] | None, typer.Option("--run", metavar="RUN", help="only these runs",
                                                              callback=boundary.run_refs)] = None,
           fmt: Annotated[list[str] | None, typer.Option("--format", metavar="FORMAT",
                                                            autocompletion=complete.report_formats,
                                                            help=report_format_help())] = None,
           out: Annotated[Path | None, typer.Option("--out", metavar="DIR", help="output folder (default: "
                                                       "results/reports/<name>/, untracked)",
                                                       callback=boundary.out_path)
                          ] = None) -> None:
    _done(call("report", db=db, run_refs=run_refs, fmt=fmt, out=out))


@command("export")
def export(out: Annotated[Path, typer.Option("--out", "-o", metavar="FILE",
                                              help="the results file to write (.jsonl.gz)")],
           db: DbOpt = DEFAULT_DB,
           run_refs: Annotated[list[str] | None, typer.Option("--run", metavar="RUN", help="only these runs (id or "
                                                              "prefix; repeatable)", callback=boundary.run_refs)] = None,
           env: Annotated[list[str] | None, typer.Option("--env", metavar="NAME",
                                                         help="only these environments (repeatable)")] = None
           ) -> None:
    _done(call("export", out=out, db=db, run_refs=run_refs, env=env))


@command("import")
def import_(files: Annotated[list[Path], typer.Argument(metavar="FILE", help="results files `matrix export` wrote")],
            db: DbOpt = DEFAULT_DB) -> None:
    _done(call("import", files=files, db=db))


@command("publish")
def publish(out: Annotated[Path, typer.Option("--out", "-o", metavar="DIR", help="the site's folder")],
            db: Annotated[list[Path] | None, typer.Option("--db", metavar="FILE", help="result stores (repeatable; "
                                                           "default $MATRIX_DB, else results/matrix.db)",
                                                           callback=boundary.store_paths)
                          ] = None,
            metric: Annotated[str, typer.Option("--metric", metavar="METRIC", autocompletion=complete.metrics,
                                               help=site_metric_help())] = HEADLINE
            ) -> None:
    _done(call("publish", out=out, db=db, metric=metric))


@command("doctor")
def doctor() -> None:
    _done(call("doctor"))


@command("clean")
def clean(run_ref: Annotated[str | None, typer.Option("--run", metavar="RUN", help="only this run's leftovers "
                                                         "(id or prefix)", callback=boundary.run_ref)] = None,
          db: DbOpt = DEFAULT_DB) -> None:
    _done(call("clean", run_ref=run_ref, db=db))


def main() -> None:
    """Entry point; errors become one line and their exit status in Boundary. SIGTERM interrupts every command
    as Ctrl-C does (130)."""
    signal.signal(signal.SIGTERM, sigterm)
    app(prog_name="matrix")


if __name__ == "__main__":
    main()
