"""The published site in a real headless Chromium, from file://: index -> a cell's history -> a run's report,
following the links the rendered pages hold, with no console error, and the history plot drawn."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.publish import publish
from tests.report.test_browser import run_chromium

pytestmark = pytest.mark.browser


def problems(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "net::ERR" in ln or "Failed to load resource" in ln]


def test_index_to_history_to_run(pooled_db: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    index = run_chromium(["--dump-dom", (site / "index.html").as_uri()], tmp_path)
    assert index.returncode == 0 and not problems(index.stderr), index.stderr[-2000:]
    assert "<h2 id=\"machines\">Machines</h2>" in index.stdout
    cell_href = re.search(r'href="(cells/[^"]+\.html)">local-cpu<', index.stdout)
    assert cell_href
    cell_page = site / cell_href.group(1)
    cell = run_chromium(["--dump-dom", cell_page.as_uri()], tmp_path)
    assert cell.returncode == 0 and not problems(cell.stderr), cell.stderr[-2000:]
    assert cell.stdout.count("<circle") == 8 and 'class="change"' in cell.stdout
    run_href = re.search(r'<a href="(\.\./runs/[^"]+\.html)"><line', cell.stdout)     # a point of the plot
    assert run_href
    run = run_chromium(["--dump-dom", (cell_page.parent / run_href.group(1)).resolve().as_uri()], tmp_path)
    assert run.returncode == 0 and not problems(run.stderr), run.stderr[-2000:]
    assert "<h1>Run 2026" in run.stdout and run.stdout.count("history</a>") == 3


def test_the_plot_is_drawn(pooled_db: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    cell = next(p for p in (site / "cells").glob("*.html") if "alpha" in p.read_text())
    shot = tmp_path / "cell.png"
    proc = run_chromium([f"--screenshot={shot}", "--window-size=1000,700", cell.as_uri()], tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    rgb = (mpimg.imread(shot)[..., :3] * 255).astype(int)
    blue = (abs(rgb[..., 0] - 0x1F) < 30) & (abs(rgb[..., 1] - 0x77) < 30) & (abs(rgb[..., 2] - 0xB4) < 30)
    assert blue.sum() > 300            # the series' line, bars and points in its colour
    header = rgb[5:15, 500:900].reshape(-1, 3)
    assert np.abs(header - [0x1F, 0x2A, 0x3C]).max() < 8       # the stylesheet loaded from file://


def test_the_index_shows_numbers_and_sparklines_and_the_tables_page_opens(pooled_db: Path, tmp_path: Path) -> None:
    """Each cell on each machine: its latest mean ± std with its unit, its change against the run before, and a
    sparkline drawn as inline SVG (no script, from file://); the per-machine tables page opens without an error."""
    site = tmp_path / "site"
    publish([pooled_db], site)
    index = run_chromium(["--dump-dom", (site / "index.html").as_uri()], tmp_path)
    assert index.returncode == 0 and not problems(index.stderr), index.stderr[-2000:]
    assert index.stdout.count('<svg class="spark"') == 6 and len(re.findall(r"± [\d.]+ img/s \(n=3\)", index.stdout)) == 6
    assert "<script" not in index.stdout
    tables = run_chromium(["--dump-dom", (site / "tables.html").as_uri()], tmp_path)
    assert tables.returncode == 0 and not problems(tables.stderr), tables.stderr[-2000:]
    assert tables.stdout.count("<h2>") == 2 and tables.stdout.count("<th>batch 32</th>") == 2
    shot = tmp_path / "index.png"
    proc = run_chromium([f"--screenshot={shot}", "--window-size=1300,1400", (site / "index.html").as_uri()], tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    rgb = (mpimg.imread(shot)[..., :3] * 255).astype(int)
    blue = (abs(rgb[..., 0] - 0x1F) < 30) & (abs(rgb[..., 1] - 0x77) < 30) & (abs(rgb[..., 2] - 0xB4) < 30)
    assert blue.sum() > 200            # the sparklines, drawn
