"""Write the site: one folder, relative links only, every page from an autoescaped template, so that it opens from
file:// and from any web host. The same stores give the same bytes: nothing of the moment (no time of
publishing, no absolute path) is written, and every list has a fixed order."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import jinja2

from runner.base import safewrite
from runner.base.errors import ConfigError, StoreError
from runner.base.safewrite import UnsafePath
from runner.publish.model import Site

_TEMPLATES = Path(__file__).parent / "templates"
# Written into every site: a folder with it is one `matrix publish` wrote, whose cells/ and runs/ it may replace.
MARK = ".matrix-site"
MARK_TEXT = "written by `matrix publish`: cells/ and runs/ are replaced on the next publish\n"
PAGE_MODE = 0o644  # a site is for a web host to serve: readable by all, under the umask


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def write(site: Site, out: Path) -> list[Path]:
    """Render every page into `out` (pages of an earlier publish that no longer exist are removed with their
    folders `cells/` and `runs/`, which belong to the site). A folder that holds anything but a site is refused:
    its own `cells/` or `runs/` are not the site's to remove. Every file is written by runner/base/safewrite.py: a
    link, a FIFO or another user's file at a page's name is refused, never written through."""
    if out.is_dir():
        safewrite.check(out / MARK)  # a link in the mark's place: said as such, not as a folder that is no site
    if out.is_dir() and _others(out) and not _marked(out):
        raise ConfigError(f"-o {out} is a folder with other files and no {MARK} (not a site `matrix publish` wrote): "
                          "pass a new or empty folder")
    pages = _render(site)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in (MARK, *ASSETS, "cells", "runs", *pages, "machines.html", "bisects.html", "tables.html"):
            if "/" not in name:  # before anything is written: a planted name stops the whole publish
                safewrite.check(out / name, folder=name in ("cells", "runs"))
        # The mark first: a publish into the same folder at the same moment sees a site from here on, never a
        # folder of someone else's files.
        safewrite.write_text(out / MARK, MARK_TEXT, mode=PAGE_MODE)
        staging = Path(tempfile.mkdtemp(prefix=safewrite.PRIVATE_PREFIX, suffix=".tmp", dir=out))
        try:
            return _write_pages(pages, out, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except UnsafePath:
        raise
    except OSError as e:
        raise StoreError(f"cannot write the site in {out} ({e.strerror or e}): pass -o with a folder you can "
                         "write") from e


ASSETS = ("site.css", "vega.js", "charts.js")  # what every page loads, beside index.html


def assets() -> dict[str, bytes]:
    """The stylesheet (with the verdicts' colours, runner/report/tone.py), the Vega bundle (vl-convert's: nothing is
    fetched from a network) and the script that draws each page's charts."""
    from runner.report import charts, tone

    css = (_TEMPLATES / "site.css").read_text() + tone.css()
    return {"site.css": css.encode(), "vega.js": charts.bundle().encode(), "charts.js": charts.EMBED.encode()}


def _others(out: Path) -> bool:
    """Whether `out` holds anything but the private files of a write in flight (safewrite's, a publish's staging)."""
    return any(not p.name.startswith(safewrite.PRIVATE_PREFIX) for p in out.iterdir())


def _marked(out: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(out / MARK).st_mode)
    except OSError:
        return False


def _render(site: Site) -> dict[str, str]:
    env = _env()
    pages: dict[str, str] = {"index.html": env.get_template("index.html.j2").render(site=site, root="")}
    if site.comparisons:
        pages["machines.html"] = env.get_template("machines.html.j2").render(site=site, root="")
    if site.bisects:
        pages["bisects.html"] = env.get_template("bisects.html.j2").render(site=site, root="")
    if site.tables:
        pages["tables.html"] = env.get_template("tables.html.j2").render(site=site, root="")
    cell_t, run_t = env.get_template("cell.html.j2"), env.get_template("run.html.j2")
    for cell in site.cells:
        pages[f"cells/{cell['slug']}.html"] = cell_t.render(site=site, cell=cell, root="../")
    for run in site.runs:
        pages[f"runs/{run['slug']}.html"] = run_t.render(site=site, run=run, root="../")
    return pages


def _write_pages(pages: dict[str, str], out: Path, staging: Path) -> list[Path]:
    """cells/ and runs/ are made whole in `staging` (a private folder inside `out`) and swapped in for the old
    ones; every other page replaces its name atomically."""
    for folder in ("cells", "runs"):
        (staging / folder).mkdir()
    for name, text in pages.items():
        if "/" in name:
            safewrite.write_text(staging / name, text, mode=PAGE_MODE)
    for folder in ("cells", "runs"):
        _swap(staging / folder, out / folder, staging)
    for page in ("machines.html", "bisects.html", "tables.html"):  # an earlier publish's page this one does not have
        if page not in pages:
            safewrite.check(out / page)
            (out / page).unlink(missing_ok=True)
    written = []
    for name, data in assets().items():
        written.append(safewrite.write_bytes(out / name, data, mode=PAGE_MODE))
    for name, text in sorted(pages.items()):
        if "/" not in name:
            safewrite.write_text(out / name, text, mode=PAGE_MODE)
        written.append(out / name)
    return written


def _swap(new: Path, old: Path, staging: Path) -> None:
    """Put the folder `new` where `old` is, moving the old one into `staging` (a name moved, never followed; it is
    removed with staging). Another publish into the same folder at the same moment may put its own in between:
    moved aside too, and the last one in stays."""
    for attempt in range(20):
        safewrite.check(old, folder=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(old, staging / f"old-{old.name}-{attempt}")
        try:
            os.replace(new, old)
            return
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
    raise StoreError(f"cannot replace {old}: another process keeps putting a folder there; publish again")
