"""The published site in a real headless Chromium, from file://: every page opens with no console message and its
charts drawn; the index opens with charts that hold the store's latest figures; a cell that got faster is green and
one that got slower red in every place the site shows it; a page with no pair says why."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.publish import publish
from runner.report.tone import COLOURS, Tone
from tests.report.test_browser import DRAWN, dom, points, run_chromium
from tests.store.synthetic import fill_history

pytestmark = pytest.mark.browser
RUNS = 5


@pytest.fixture(scope="module")
def two_ways(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One machine, two environments of two cells each: `fast` 30% faster and `slow` 30% slower in their last run.
    Returns the published site."""
    tmp = tmp_path_factory.mktemp("two-ways")
    db = tmp / "s.db"
    fill_history(db, "box", "AMD EPYC", runs=RUNS, repeats=3, cells=2, seed=1, step_at=RUNS - 1, step=1.3,
                 environment="fast")
    fill_history(db, "box", "AMD EPYC", runs=RUNS, repeats=3, cells=2, seed=2, step_at=RUNS - 1, step=0.7,
                 environment="slow")
    publish([db], tmp / "site")
    return tmp / "site"


def latest_means(db: Path) -> dict[tuple[str, int], float]:
    """Each cell's latest figure straight from the store: the mean throughput of the last run that measured it."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT id, run_id, environment, params, metrics FROM results WHERE status='ok'").fetchall()
    con.close()
    runs: dict[tuple[str, int], dict[str, list[tuple[int, float]]]] = {}
    for i, run, env, params, metrics in rows:
        key = (env, int(json.loads(params)["batch_size"]))
        runs.setdefault(key, {}).setdefault(run, []).append((i, json.loads(metrics)["throughput"]))
    return {k: float(np.mean([v for _, v in max(by_run.values(), key=lambda r: max(i for i, _ in r))]))
            for k, by_run in runs.items()}


def test_the_index_opens_with_charts_of_the_stores_figures(two_ways: Path, tmp_path: Path) -> None:
    html = dom(two_ways / "index.html", tmp_path)
    main = html[html.index("<main>"):]
    assert main.index('id="chart-latest"') < main.index('id="chart-changed"') < main.index("<table")
    assert html.count('data-drawn="yes"') == html.count("data-spec=") == 2
    shown = points(html, "latest")
    expected = latest_means(two_ways.parent / "s.db")
    assert len(shown) == len(expected) == 4
    x = next(k for k in shown[0] if k.startswith("latest throughput"))
    figures = sorted(round(float(p[x]), 6) for p in shown)
    assert figures == sorted(round(v, 6) for v in expected.values())
    history = points(html, "changed")
    assert len(history) == 4 * RUNS                        # every run of the four cells that changed
    rings = points(html, "changed", "rings")
    assert sorted(r["_stroke"] for r in rings) == sorted([COLOURS[Tone.BETTER]] * 2 + [COLOURS[Tone.WORSE]] * 2)


def test_faster_is_green_and_slower_red_in_every_place(two_ways: Path, tmp_path: Path) -> None:
    """The chart's dots, the sentences, the index's table and each cell's page give a faster cell one colour and a
    slower one another, the verdicts' own (runner/report/tone.py), never the colour of their words."""
    html = dom(two_ways / "index.html", tmp_path)
    for p in points(html, "latest"):
        env = p["label"].split(" · ")[0]
        assert p["_fill"] == COLOURS[Tone.BETTER if env == "fast" else Tone.WORSE], p
    said = re.findall(r'<li class="(\w+)">(fast|slow) ·', html)
    assert sorted(said) == [("better", "fast"), ("better", "fast"), ("worse", "slow"), ("worse", "slow")]
    rows = re.findall(r'<a href="(cells/[^"]+)">(fast|slow)</a>.*?<td class="(\w+)">(step: [^<]+)</td>', html, re.S)
    assert sorted((env, tone) for _, env, tone, _ in rows) == [("fast", "better"), ("fast", "better"),
                                                             ("slow", "worse"), ("slow", "worse")]
    for href, env, tone, words in rows:
        size = re.match(r"step: (\d\.\d\d)x (faster|slower) \(\d\.\d\d–\d\.\d\d, p(=|&lt;)", words)
        assert size and size.group(2) == ("faster" if env == "fast" else "slower"), words
        assert 1.2 < float(size.group(1)) < (1.4 if env == "fast" else 1.6)   # x1.3 and x0.7 (1.43x slower)
        page = dom(two_ways / href, tmp_path)
        last = re.findall(r"<tr><td><a .*?</tr>", page, re.S)[-1]
        assert f'<td class="{tone}">{words}</td>' in last   # the cell's page agrees with the index
        (ring,) = points(page, "history", "rings")
        assert ring["_stroke"] == COLOURS[Tone(tone)]
    css = (two_ways / "site.css").read_text()
    assert f"td.better, li.better, span.better {{ color: {COLOURS[Tone.BETTER]};" in css
    assert f"td.worse, li.worse, span.worse {{ color: {COLOURS[Tone.WORSE]};" in css
    shot = tmp_path / "index.png"
    proc = run_chromium([DRAWN, f"--screenshot={shot}", "--window-size=1300,900", (two_ways / "index.html").as_uri()],
                        tmp_path)
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    rgb = (mpimg.imread(shot)[..., :3] * 255).astype(int)
    for tone in (Tone.BETTER, Tone.WORSE):   # seen on the first screen: sentences, dots, rings
        want = [int(COLOURS[tone][i:i + 2], 16) for i in (1, 3, 5)]
        assert (np.abs(rgb - want).max(axis=2) < 12).sum() > 300, tone
    header = rgb[5:15, 500:900].reshape(-1, 3)
    assert np.abs(header - [0x1F, 0x2A, 0x3C]).max() < 8       # the stylesheet loaded from file://


def test_index_to_history_to_run(pooled_db: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    index = dom(site / "index.html", tmp_path)
    assert '<h2 id="machines">Machines</h2>' in index
    cell_href = re.search(r'href="(cells/[^"]+\.html)">local-cpu<', index)
    assert cell_href
    cell_page = site / cell_href.group(1)
    cell = dom(cell_page, tmp_path)
    assert len(points(cell, "history")) == 8 and len(points(cell, "history", "rings")) == 1
    run_href = re.search(r'<a href="(\.\./runs/[^"]+\.html)">2026', cell)     # a run of the table
    assert run_href
    run = dom((cell_page.parent / run_href.group(1)).resolve(), tmp_path)
    assert "<h1>Run 2026" in run and run.count("history</a>") == 3


def test_the_other_pages_open_and_a_page_with_no_pair_says_why(pooled_db: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    publish([pooled_db], site)
    machines = dom(site / "machines.html", tmp_path)
    (said,) = re.findall(r"<h2>A: [^<]+</h2>\s*<p>([^<]+)</p>\s*(?=<h2>|</main>)", machines)  # no table, a sentence
    assert said.startswith("No cell was measured on both machines:") and said.endswith(".") and ". " not in said
    tables = dom(site / "tables.html", tmp_path)
    assert tables.count("<h2>") == 2 and tables.count("<th>batch 32</th>") == 2
    assert re.search(r"<td class=\"n\" title=\"n=3\">\d+\.\d+ ± \d", tables)   # the one number format
