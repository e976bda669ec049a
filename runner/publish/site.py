"""Write the site: one folder, relative links only, every page from an autoescaped template, so that it opens from
file:// and from any web host. The same stores give the same bytes: nothing of the moment (no time of
publishing, no absolute path) is written, and every list has a fixed order."""

from __future__ import annotations

import shutil
from pathlib import Path

import jinja2

from runner.errors import ConfigError, StoreError
from runner.publish.model import Site

_TEMPLATES = Path(__file__).parent / "templates"
# Written into every site: a folder with it is one `matrix publish` wrote, whose cells/ and runs/ it may replace.
MARK = ".matrix-site"


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True,
                              undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                              keep_trailing_newline=True)


def write(site: Site, out: Path) -> list[Path]:
    """Render every page into `out` (pages of an earlier publish that no longer exist are removed with their
    folders `cells/` and `runs/`, which belong to the site). A folder that holds anything but a site is refused:
    its own `cells/` or `runs/` are not the site's to remove."""
    if out.is_dir() and any(out.iterdir()) and not (out / MARK).is_file():
        raise ConfigError(f"-o {out} is a folder with other files and no {MARK} (not a site `matrix publish` wrote): "
                          "pass a new or empty folder")
    env = _env()
    pages: dict[str, str] = {"index.html": env.get_template("index.html.j2").render(site=site, root="")}
    if site.comparisons:
        pages["machines.html"] = env.get_template("machines.html.j2").render(site=site, root="")
    if site.bisects:
        pages["bisects.html"] = env.get_template("bisects.html.j2").render(site=site, root="")
    cell_t, run_t = env.get_template("cell.html.j2"), env.get_template("run.html.j2")
    for cell in site.cells:
        pages[f"cells/{cell['slug']}.html"] = cell_t.render(site=site, cell=cell, root="../")
    for run in site.runs:
        pages[f"runs/{run['slug']}.html"] = run_t.render(site=site, run=run, root="../")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for folder in ("cells", "runs"):
            shutil.rmtree(out / folder, ignore_errors=True)
            (out / folder).mkdir()
        for page in ("machines.html", "bisects.html"):  # an earlier publish's page this one does not have
            if page not in pages:
                (out / page).unlink(missing_ok=True)
        (out / MARK).write_text("written by `matrix publish`: cells/ and runs/ are replaced on the next publish\n")
        shutil.copyfile(_TEMPLATES / "site.css", out / "site.css")
        written = [out / "site.css"]
        for name, text in sorted(pages.items()):
            path = out / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as e:
        raise StoreError(f"cannot write the site in {out} ({e.strerror or e}): pass -o with a folder you can "
                         "write") from e
    return written
