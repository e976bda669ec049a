"""The HTML report opened in a real headless Chromium: it loads offline, and the page shows tables and plots."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.report import report_command
from tests.conftest import require

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    require(Path(path).exists(), "headless Chromium not installed: run scripts/browser-setup.sh")
    return path


@pytest.fixture(scope="module")
def html_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.report.conftest import fill_store, load_results

    tmp = tmp_path_factory.mktemp("browser")
    db = fill_store(tmp / "results.db", load_results())
    out = tmp / "report"
    report_command(db, None, ["html"], out)
    return out / "report.html"


def run_chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr",
           "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_html_is_self_contained(html_report: Path) -> None:
    html = html_report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)   # nothing to fetch
    assert "<link" not in html and "<script" not in html.lower() and "@import" not in html
    assert html.count("<svg") == 4


def test_page_loads_without_errors_and_has_tables_and_plots(html_report: Path, tmp_path: Path) -> None:
    proc = run_chromium(["--dump-dom", html_report.as_uri()], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    assert "<title>Benchmark report: seeds</title>" in dom
    assert dom.count("<table") >= 12
    assert dom.count("<svg") == 4
    assert "Tesla V100-SXM2-16GB" in dom and "CUDNN_STATUS_EXECUTION_FAILED" in dom
    problems = [ln for ln in proc.stderr.splitlines()
                if "CONSOLE" in ln or "net::ERR" in ln or "Failed to load resource" in ln]
    assert not problems, problems


def test_screenshot_shows_a_rendered_page(html_report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    proc = run_chromium([f"--screenshot={shot}", "--window-size=1400,3000", html_report.as_uri()], tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (3000, 1400)
    rgb = (img[..., :3] * 255).astype(np.uint8).reshape(-1, 3)
    colours = np.unique(rgb[::7], axis=0)
    assert len(colours) > 50                      # text, tables, header: not a blank single colour
    dark = (rgb.sum(axis=1) < 200).mean()
    assert 0.005 < dark < 0.5                      # some dark text and the header bar, mostly page
    header = img[5:15, 1000:1350, :3].reshape(-1, 3)
    assert np.allclose(header, [0x1F / 255, 0x2A / 255, 0x3C / 255], atol=0.02)  # the CSS applied: header bar
