"""The HTML report opened in a real headless Chromium: it opens offline with no console message, the answer comes
first, every chart is drawn, and the charts hold the store's figures (their count and values) in the colours of
their verdicts."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.report import report_command
from runner.report.tone import COLOURS, Tone
from tests.conftest import require

pytestmark = pytest.mark.browser

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--hide-scrollbars"]
# Long enough for Vega to draw every chart of a page before the DOM is dumped (virtual time: no real wait).
DRAWN = "--virtual-time-budget=15000"


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    require(Path(path).exists(), "headless Chromium not installed: run scripts/browser-setup.sh")
    return path


def run_chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr",
           "--v=0", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def problems(stderr: str) -> list[str]:
    """Every console message (an error, a Vega warning) and every failed load."""
    return [ln for ln in stderr.splitlines() if "CONSOLE" in ln or "net::ERR" in ln or "Failed to load resource" in ln]


def dom(page: Path, tmp: Path) -> str:
    """The page's DOM once its charts are drawn; it must load without a console message."""
    proc = run_chromium([DRAWN, "--dump-dom", page.as_uri()], tmp)
    assert proc.returncode == 0 and not problems(proc.stderr), (problems(proc.stderr), proc.stderr[-2000:])
    return proc.stdout


def points(html: str, chart: str, marks: str = "points") -> list[dict[str, str]]:
    """The drawn points of one chart (Vega's SVG, by the mark's name): each one's ARIA fields and its fill."""
    figure = html.split(f'id="chart-{chart}"', 1)[1].split("</figure>", 1)[0]
    groups = re.findall(rf'<g class="mark-symbol role-mark {marks}_marks"[^>]*>(.*?)</g>', figure, re.S)
    out = []
    for g in groups:
        for attrs in re.findall(r"<path ([^>]*)>", g):
            label = re.search(r'aria-label="([^"]*)"', attrs)
            fields = dict(part.split(": ", 1) for part in label.group(1).split("; ") if ": " in part) if label else {}
            fill = re.search(r'fill="([^"]*)"', attrs)
            stroke = re.search(r'stroke="(#[^"]*)"', attrs)
            out.append({**fields, "_fill": fill.group(1) if fill else "", "_stroke": stroke.group(1) if stroke else ""})
    return out


@pytest.fixture(scope="module")
def html_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.report.conftest import fill_store, load_results

    tmp = tmp_path_factory.mktemp("browser")
    db = fill_store(tmp / "results.db", load_results())
    out = tmp / "report"
    report_command(db, None, ["html", "json"], out)
    return out / "report.html"


@pytest.fixture(scope="module")
def drawn(html_report: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return dom(html_report, tmp_path_factory.mktemp("dom"))


def test_html_is_self_contained(html_report: Path) -> None:
    html = html_report.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, re.I)   # nothing to fetch
    assert "<link" not in html and "@import" not in html and not re.search(r"<script[^>]*src=", html)
    assert set(re.findall(r'id="spec-([a-z_]+)"', html)) == {"answer", "throughput", "iter_time", "peak_mem",
                                                              "scaling"}


def test_every_chart_is_drawn_without_a_console_message(drawn: str) -> None:
    assert "<title>Benchmark report: seeds</title>" in drawn
    assert drawn.count('data-drawn="yes"') == drawn.count("data-spec=") == 5
    assert drawn[drawn.index("<main>"):].count("<table") >= 12
    assert "Tesla V100-SXM2-16GB" in drawn and "CUDNN_STATUS_EXECUTION_FAILED" in drawn
    # The answer comes first: its section before the grid's, its chart before any table.
    main = drawn[drawn.index("<main>"):]
    assert main.index('id="answer"') < main.index('id="grid"') < main.index("<table")
    assert main.index('id="chart-answer"') < main.index("<table")


def test_the_answer_chart_holds_every_ratio_in_its_verdicts_colour(drawn: str, html_report: Path) -> None:
    findings = json.loads((html_report.parent / "report.json").read_text())["answer"]["findings"]
    charted = [f for f in findings if f["ratio"] is not None and f["ratio"] > 0]
    shown = points(drawn, "answer")
    assert len(shown) == len(charted) == 16
    ratio = next(k for k in shown[0] if k.startswith("B/A of throughput"))  # the x field, unrounded
    by_label = {p["label"]: p for p in shown}
    words = {"better": "faster", "worse": "slower", "same": "no change", "undecided": "undecided"}
    for f in charted:
        p = by_label[f["label"]]
        assert float(p[ratio]) == pytest.approx(f["ratio"], rel=1e-9)
        assert p["verdict"] == words[f["tone"]] and p["_fill"] == COLOURS[Tone(f["tone"])]
    fills = {p["verdict"]: p["_fill"] for p in shown}
    assert fills["faster"] != fills["slower"] and fills["faster"] == COLOURS[Tone.BETTER]


def test_the_throughput_chart_holds_each_cells_mean(drawn: str, html_report: Path) -> None:
    """One point per cell that measured a throughput (at its configuration's smallest layout), at its mean."""
    cells = json.loads((html_report.parent / "report.json").read_text())["cells"]
    least = {}
    for c in cells:
        k = (c["model"], c["dataset"], c["options"])
        least[k] = min(least.get(k, 10**9), c["gpus"] * c["nodes"])
    expected = sorted(round(c["throughput_mean"], 6) for c in cells if c["throughput_n"] and
                      c["gpus"] * c["nodes"] == least[(c["model"], c["dataset"], c["options"])])
    shown = points(drawn, "throughput")
    assert len(shown) == len(expected) == 16
    y = next(k for k in shown[0] if k.startswith("throughput (img/s)"))  # the y field, unrounded
    assert sorted(round(float(p[y]), 6) for p in shown) == expected


def test_the_first_screen_states_the_answer_in_colour(html_report: Path, tmp_path: Path) -> None:
    """What a reader sees first: the header, the answer's sentences (green for faster, red for slower) and its
    chart, drawn."""
    shot = tmp_path / "report.png"
    proc = run_chromium([DRAWN, f"--screenshot={shot}", "--window-size=1400,1000", html_report.as_uri()], tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    img = mpimg.imread(shot)
    assert img.shape[:2] == (1000, 1400)
    rgb = (img[..., :3] * 255).astype(int)

    def share(colour: str) -> float:
        want = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
        return float((np.abs(rgb - want).max(axis=2) < 12).mean())

    assert share(COLOURS[Tone.BETTER]) > 0.001 and share(COLOURS[Tone.WORSE]) > 0.0005  # sentences and dots
    header = rgb[5:15, 1000:1350].reshape(-1, 3)
    assert np.abs(header - [0x1F, 0x2A, 0x3C]).max() < 8       # the CSS applied: header bar


def test_a_report_with_nothing_to_compare_says_why(tmp_path: Path) -> None:
    from tests.analysis.helpers import rows_for, store_of

    db = store_of(tmp_path / "one.db", rows_for("k", [100.0, 101.0, 99.0], run_id="r"))
    report_command(db, None, ["html"], tmp_path / "out")
    html = dom(tmp_path / "out" / "report.html", tmp_path)
    answer = html.split('id="answer"', 1)[1].split("</section>", 1)[0]
    said = re.sub(r"<[^>]+>", "", answer).split("The answer", 1)[1].strip()
    assert said.startswith("Nothing here is compared: one environment, one precision, every cell measured by one "
                           "run.") and said.count(".") == 2
    assert "<figure" not in answer
