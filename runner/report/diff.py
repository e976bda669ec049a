"""`matrix diff A B` and the difference `matrix bisect` shows for the pair it names: what differs between two
environments, as terminal tables, Markdown or JSON (the numbers and the comparison are runner/analysis/envdiff.py)."""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from runner import analysis as an
from runner.analysis import envdiff
from runner.analysis import sides as sides_
from runner.base.errors import ConfigError, StoreError
from runner.base.gcpause import batch
from runner.report import DIFF_FORMATS
from runner.report.fmt import Table, TableCell, md_table, short_digest
from runner.store import Store
from runner.store import exchange as store_exchange

DIFF_SCHEMA = 1
SHOWN_PACKAGES = 25  # system packages listed by default (the relevant ones first); --all lists every one


def sides(store: Store, a: str, b: str) -> tuple[envdiff.EnvSide, envdiff.EnvSide]:
    """Two environments of the store as their newest repeats recorded them, each one machine's as
    runner/analysis/sides.py selects it (this store's own by default; `NAME@machine:ID` another's); an unknown name
    is a ConfigError that lists the names the store has."""
    known = store.environments()
    for name in (a, b):
        if sides_.split(name)[0] not in known:
            raise ConfigError(f"environment {name!r} has no result in {store.path}; environments there: "
                              f"{', '.join(known) or '(none)'}")
    return side_of(store, a), side_of(store, b)


def side_of(store: Store, name: str, keys: list[str] | None = None) -> envdiff.EnvSide:
    """One environment (only the rows of `keys` when given: one cell) with its capture: the rows of the one machine
    runner/analysis/sides.py selects for it."""
    env = sides_.split(name)[0]
    rows = list(store.rows(environments=[env], keys=keys))
    if rows:
        chosen = set(sides_.select(an.frame(rows), f"env:{name}", store_exchange.store_id(store) or "").frame["id"])
        rows = [r for r in rows if r.id in chosen]
    return envdiff.side(name, rows, store.captures(r.capture_id for r in rows))


def tables(d: envdiff.EnvDiff, everything: bool = False) -> list[tuple[str, Table]]:
    """The difference as titled tables: what differs (versions, image, hardware), steering variables, torch's
    build, precisions, then each package list (the relevant system packages first, SHOWN_PACKAGES of them
    unless `everything`)."""
    a, b = d.a.name, d.b.name
    out: list[tuple[str, Table]] = []
    facts = Table(["", a, b])
    for c in d.facts if everything else d.differing:
        a_text, b_text = (short_digest(c.a), short_digest(c.b)) if c.label in ("image id", "image digest") else (c.a, c.b)
        facts.add(c.label, TableCell(a_text or "—", "muted" if not c.a else ""), TableCell(b_text or "—", "muted" if not c.b else ""))
    if facts.rows:
        out.append(("What differs" if not everything else "What each recorded", facts))
    for title, items in (("Variables that steer the libraries", d.env_vars), ("torch's build", d.build),
                         ("How the precision ran", d.precision)):
        if items:
            t = Table(["", a, b])
            for c in items:
                t.add(c.label, c.a or "(unset)", c.b or "(unset)")
            out.append((title, t))
    for p in d.packages:
        if p.empty or not all(p.captured):
            continue
        rows: list[tuple[str, str, str]] = [(n, va, vb) for n, va, vb in p.changed]
        rows += [(n, "—", v) for n, v in p.added] + [(n, v, "—") for n, v in p.removed]
        order = {n: i for i, n in enumerate(envdiff.relevant_first(r[0] for r in rows))}
        rows.sort(key=lambda r: order[r[0]])
        limit = len(rows) if everything or p.kind == "Python packages" else SHOWN_PACKAGES
        t = Table(["package", a, b])
        for n, va, vb in rows[:limit]:
            t.add(n, va, vb)
        more = len(rows) - limit
        title = f"{p.kind}: {p.counts_text()}" + (f"; {more} more not shown (--all lists them)" if more > 0 else "")
        out.append((title, t))
    return out


def header(d: envdiff.EnvDiff) -> list[str]:
    lines = []
    for label, s in (("A", d.a), ("B", d.b)):
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.started_at)) if s.started_at else "—"
        lines.append(f"{label}: {s.name} (newest repeat {when}, run {s.run_id or '—'}, cell {s.cell_key or '—'})")
    if not d.differing and not d.env_vars and not d.build and not d.precision and all(p.empty for p in d.packages):
        lines.append("Nothing recorded differs between the two.")
    return lines


def render(d: envdiff.EnvDiff, fmt: str | None = None, everything: bool = False) -> str:
    if fmt == "json":
        return json.dumps({"schema": DIFF_SCHEMA, "kind": "matrix-diff", **envdiff.to_json(d)}, indent=2) + "\n"
    if fmt == "md":
        parts = ["\n".join(f"- {line}" for line in header(d))]
        for title, t in tables(d, everything):
            parts.append(f"**{title}**\n\n{md_table(t)}")
        parts += [f"Note: {n}" for n in d.notes]
        return "\n\n".join(parts) + "\n"
    from rich.text import Text

    from runner.base.console import console as make_console
    from runner.base.console import rich_table

    buf = io.StringIO()
    console = make_console(buf, tty=sys.stdout.isatty())
    for line in header(d):
        console.print(Text(line))
    for title, t in tables(d, everything):
        console.print(rich_table(t, title))
    for n in d.notes:
        console.print(Text(f"note: {n}", style="dim"))
    return buf.getvalue()


@batch
def diff_command(db: Path, a: str, b: str, fmt: str | None = None, everything: bool = False) -> str:
    """`matrix diff A B`: what differs between two environments of the store."""
    if fmt is not None and fmt not in DIFF_FORMATS:
        raise ConfigError(f"unknown diff format {fmt!r}; allowed: {', '.join(DIFF_FORMATS)} (default: tables)")
    with Store(db, readonly=True) as store:
        if not store.environments():
            raise StoreError(f"no results in {db}: run `matrix run` first")
        sa, sb = sides(store, a, b)
    return render(envdiff.diff(sa, sb), fmt, everything)


def diff_doc(d: envdiff.EnvDiff) -> Mapping[str, Any]:
    return envdiff.to_json(d)
