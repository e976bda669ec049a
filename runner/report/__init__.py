"""Reports and comparisons from the result store (docs/architecture.md): the report written (`report_command`) and
the comparison as text (`compare_command`), which the `report` and `compare` commands (runner/commands/) print,
and the tests and the kit call. Importing the package loads no statistics (the command line reads its format
lists for `--help`): each function imports what it computes with."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.base.errors import ConfigError, StoreError
from runner.base.gcpause import batch
from runner.record.metrics import HEADLINE
from runner.report.formats import FORMATS

if TYPE_CHECKING:
    from runner.record.stored import StoredRepeat
    from runner.store import Store

REPORT_FORMATS = tuple(FORMATS.names())  # runner/report/formats/: every registered format
DEFAULT_REPORT_FORMATS = ("md", "html")
COMPARE_FORMATS = ("md", "csv", "json")
DIFF_FORMATS = ("md", "json")
# Reports land under the untracked results/ by default; reports/ holds only what is committed on purpose.
REPORTS_DIR = Path("results") / "reports"


def _check_formats(formats: Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    out = []
    for f in formats:
        for part in f.split(","):
            part = part.strip().lower()
            if part == "markdown":
                part = "md"
            if part not in allowed:
                raise ConfigError(f"unknown {what} format {part!r}; allowed: {', '.join(allowed)}")
            if part not in out:
                out.append(part)
    return out


def _open(db: Path) -> Store:
    from runner.store import Store
    return Store(db, readonly=True)


def _read(db: Path, runs: Sequence[str] | None) -> tuple[list[Any], list[str] | None, list[StoredRepeat]]:
    """The store's run records, the chosen run ids (None: all) and every stored row of those runs, read once."""
    with _open(db) as store:
        infos = store.runs()
        run_ids = [store.resolve_run(r) for r in runs] if runs else None
        return infos, run_ids, list(store.rows(run_ids, latest_only=False))


def newest(rows: list[StoredRepeat]) -> list[StoredRepeat]:
    """Each repeat's newest row (the largest id per cell and repeat), in id order: what Store.rows() returns by
    default, taken from rows already read."""
    kept: dict[tuple[str, int], StoredRepeat] = {}
    for r in rows:
        k = (r.cell_key, r.repeat)
        if k not in kept or r.id > kept[k].id:
            kept[k] = r
    return sorted(kept.values(), key=lambda r: r.id)


def _frame(infos: list[Any], run_ids: list[str] | None, rows: list[StoredRepeat], db: Path,
           every: list[StoredRepeat] | None = None) -> tuple[Any, list[dict[str, Any]], str]:
    """The frame of `rows` (each repeat's newest), and the run records of every run that stored one of `every` (all
    the rows read: a run whose repeats a later run measured again is still a run of the report), each with its
    repeats counted as admission sees them."""
    if not rows:
        scope = f"runs {', '.join(run_ids)}" if run_ids else str(db)
        raise StoreError(f"no results in {scope}: run `matrix run` first (or pick runs with --run)")
    from runner import analysis as an
    df = an.frame(rows)
    counts: dict[str, dict[str, int]] = {}
    for r in every if every is not None else rows:
        c = counts.setdefault(r.run_id, {})
        status = r.admission.status
        c[status] = c.get(status, 0) + 1
    records: list[dict[str, Any]] = [{"run_id": r.run_id, "matrix_name": r.matrix_name, "started_at": r.started_at,
                "finished_at": r.finished_at, "host": r.host, "status": r.status,
                "counts": dict(sorted(counts[r.run_id].items())), "admitted": True} for r in infos if r.run_id in counts]
    names = {str(r["matrix_name"]) for r in records if r["matrix_name"]}
    name = names.pop() if len(names) == 1 else "matrix"
    return df, records, name


def load(db: Path, runs: Sequence[str] | None = None) -> tuple[Any, list[dict[str, Any]], str]:
    """The long frame of the chosen runs (all rows when none), their run records and the report name."""
    infos, run_ids, rows = _read(db, runs)
    return _frame(infos, run_ids, newest(rows), db)


def _history(rows: list[StoredRepeat]) -> Any:
    """Each cell's throughput per measurement over every stored row (a re-run's older repeats are history); no
    frame is built when no cell was measured by more than one run (it could not have two points)."""
    from runner import analysis as an
    from runner.analysis.history import COLUMNS, history

    runs_of: dict[str, set[str]] = {}
    for r in rows:
        runs_of.setdefault(r.cell_key, set()).add(r.run_id)
    if all(len(v) < 2 for v in runs_of.values()):
        import pandas as pd
        return pd.DataFrame(columns=COLUMNS)
    return history(an.frame(rows))


def load_history(db: Path, runs: Sequence[str] | None = None) -> Any:
    """Each cell's throughput per run over every stored row (a re-run's older repeats are history)."""
    return _history(_read(db, runs)[2])


@batch
def report_command(db: Path, runs: Sequence[str] | None = None, formats: Sequence[str] | None = None,
                   out: Path | None = None) -> list[Path]:
    """`matrix report`: write the report (default Markdown + HTML) into `out`; returns the files written.

    `out` defaults to reports/<matrix name>/; `runs` are run ids or prefixes (default: every stored run).
    """
    import contextlib

    from runner.base.aside import Aside
    from runner.report import render, views
    from runner.report.painter import Painter
    from runner.store import exchange

    fmts = _check_formats(formats or DEFAULT_REPORT_FORMATS, tuple(FORMATS.names()), "report")
    # A format that shows PNGs has them drawn in a second process, which starts its engine now.
    pngs = any("png" in FORMATS.get(f).plots for f in fmts)
    with Painter() if pngs else contextlib.nullcontext() as painter, Aside() as texts:
        infos, run_ids, rows = _read(db, runs)  # the store read once: its newest rows, and all of them for history
        df, records, name = _frame(infos, run_ids, newest(rows), db, rows)
        # What the frame alone makes (repeats.csv) is made in a child meanwhile; forked before the painter's threads
        # start (the first charts are sent with the summary), so only this thread is copied.
        render.start_ahead(df, fmts, texts)
        with _open(db) as store:
            provenance = exchange.provenance(store)
        hist = _history(rows)
        early: dict[str, Any] = {}

        def charts_now(summary: Any) -> None:  # drawn while the comparisons are built
            if painter is not None:
                early.update(render.painted(render.summary_charts(summary, hist), painter))

        def answer_now(found: Any) -> None:  # drawn while the other views are built
            if painter is not None:
                early.update(render.painted(render.answer_charts(found), painter))

        model = views.build(df, records, name, history=hist, provenance=provenance, stored=len(rows),
                            on_summary=charts_now, on_answer=answer_now)
        return render.write_report(model, fmts, out or REPORTS_DIR / render.slug(name), painter, early or None, texts)


@batch
def compare_command(db: Path, a: str, b: str, fmt: str | None = None, metric: str = HEADLINE,
                    min_effect: float | None = None, alpha: float | None = None, pool: bool = False) -> str:
    """`matrix compare A B`: the comparison as text (md, csv, json, or rich tables for the terminal if None).

    A and B are environment names, tags, backend kinds or run id prefixes (`env:`/`tag:`/`backend:`/`run:`
    in front picks the kind when names clash), each one machine's repeats (runner/analysis/sides.py: this store's
    own by default; `NAME@machine:ID` names another), or whole machines (`machine:ID`, `host:NAME`). Sides that share
    an environment, one of them holding several, pair on the environment as well (runner/analysis/compare.py
    `pair_keys`). A side that holds more than one definition of a cell compares the newest and lists the others;
    `pool` pools them.
    """
    from runner import analysis as an
    from runner.report import render
    from runner.store import exchange

    fmt_ = _check_formats([fmt], COMPARE_FORMATS, "compare")[0] if fmt else None
    m = an.get_metric(metric)
    with _open(db) as store:
        rows = list(store.rows(latest_only=False))
        here, prov = exchange.store_id(store) or "", exchange.provenance(store)
    if not rows:
        raise StoreError(f"no results in {db}: run `matrix run` first")
    df = an.frame(rows)
    comparison = an.compare(an.select_side(df, a, pool, here, prov), an.select_side(df, b, pool, here, prov), m,
                            an.ALPHA if alpha is None else alpha, an.MIN_EFFECT if min_effect is None else min_effect)
    if fmt_ == "md":
        return render.compare_markdown(comparison)
    if fmt_ == "csv":
        return render.compare_csv(comparison)
    if fmt_ == "json":
        return render.compare_json(comparison)
    return render.compare_terminal(comparison)


__all__ = ["report_command", "compare_command", "load", "REPORT_FORMATS", "COMPARE_FORMATS", "DIFF_FORMATS",
           "DEFAULT_REPORT_FORMATS"]
