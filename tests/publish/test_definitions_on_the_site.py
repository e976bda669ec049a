"""The site's histories are by definition and by admission (issue 37): a series is one cell key on one machine, a
change of definition is a boundary that says what changed and is never tested as a speed change, and a repeat
admission set aside (diverged, refused) is never plotted or tested as an ok one. The stores are made as a team
makes them: measured, exported, imported."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from runner.commands.export import export_command
from runner.commands.import_ import import_command
from runner.publish import publish
from runner.report import compare_command, load_history
from tests.store.synthetic import fill_history


def team_store(tmp_path: Path, src: Path) -> Path:
    export_command(src, tmp_path / "box.jsonl.gz", None, None)
    import_command(tmp_path / "team.db", [tmp_path / "box.jsonl.gz"])
    return tmp_path / "team.db"


@pytest.fixture(scope="module")
def settings_changed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four nightly runs at `iterations: 20` (~100 img/s), then four at `iterations: 50` (~110 img/s): the matrix was
    edited between runs 4 and 5, so the cell's key changed with it."""
    tmp = tmp_path_factory.mktemp("settings")
    box = fill_history(tmp / "box.db", "box", "AMD EPYC", runs=4, repeats=4, cells=1, seed=1)
    fill_history(box, "box", "AMD EPYC", runs=4, repeats=4, cells=1, seed=2, first_run=1.7e9 + 4 * 86400,
                 iterations=50, step_at=0, step=1.1)
    return team_store(tmp, box)


def test_the_site_draws_a_boundary_and_tests_no_change_across_it(settings_changed: Path, tmp_path: Path) -> None:
    publish([settings_changed], tmp_path / "site")
    (page,) = [p.read_text() for p in (tmp_path / "site" / "cells").glob("*.html")]
    # No change claimed across the boundary ("1.10x faster" at the 5th run once); an undecided point's interval may
    # still be said in words ("between 2.5% faster and 9.0% slower").
    assert not re.search(r"\d\.\d\dx (faster|slower)", page) and "step:" not in page
    assert ("definition changed: run settings iterations=20 warmup=5 seed=0 -&gt; iterations=50 warmup=5 seed=0 "
            "(not compared across)") in page
    assert 'class="boundary"' in page and "Measured under 2 definitions" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert 'class="better"' not in index and 'class="worse"' not in index and "1.10x" not in index


def test_compare_and_the_report_say_the_same(settings_changed: Path) -> None:
    con = sqlite3.connect(settings_changed)
    first, last = (r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY started_at").fetchall()[::7])
    con.close()
    out = json.loads(compare_command(settings_changed, f"run:{first}", f"run:{last}", "json"))
    assert out["pairs"][0]["verdict"].startswith("not comparable: run settings differ")
    hist = load_history(settings_changed)
    assert not hist["step"].any() and hist["series"].nunique() == 2
    bounds = hist[hist["boundary"] != ""]
    assert len(bounds) == 1 and bounds["boundary"].iloc[0].startswith("run settings iterations=20")
    assert bounds["undecided"].iloc[0] == "" and bounds["ratio"].isna().all()


def night(db: Path, like: str, run_id: str, t0: float, extra: dict[str, object]) -> None:
    """Append a night to a store as `matrix run` would have stored it: the repeats of run `like`, measured again at
    `t0` with `extra` in their metrics (the store is append-only: nothing is changed)."""
    con = sqlite3.connect(db)
    try:
        con.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, argv, host, "
                    "status) SELECT ?, schema, ?, ?, matrix_path, matrix_name, argv, host, status FROM runs "
                    "WHERE run_id=?", (run_id, t0, t0 + 3600, like))
        cols = [r[1] for r in con.execute("PRAGMA table_info(results)") if r[1] != "id"]
        for row in con.execute(f"SELECT {', '.join(cols)} FROM results WHERE run_id=? ORDER BY id", (like,)).fetchall():
            r = dict(zip(cols, row, strict=True))
            r.update(run_id=run_id, started_at=t0 + r["repeat"], finished_at=t0 + r["repeat"] + 1,
                     metrics=json.dumps({**json.loads(r["metrics"]), **extra}))
            con.execute(f"INSERT INTO results ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [r[c] for c in cols])
        con.commit()
    finally:
        con.close()


@pytest.fixture(scope="module")
def not_admitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three nightly runs at ~100 img/s; then a night whose repeats diverged (a NaN loss the benchmark recorded, its
    figure 500 img/s kept for the record), a night that measured 10 of the 20 iterations asked (refused, 400 img/s),
    and three more nights at ~100."""
    tmp = tmp_path_factory.mktemp("admission")
    box = fill_history(tmp / "box.db", "box", "AMD EPYC", runs=3, repeats=3, cells=1, seed=4)
    con = sqlite3.connect(box)
    last = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC").fetchone()[0]
    con.close()
    night(box, last, "20260100-000000-d1verg", 1.7e9 + 3 * 86400,
          {"throughput": 500.0, "images": 500.0, "finite": {"all": False}})
    night(box, last, "20260101-000000-5h0rt0", 1.7e9 + 4 * 86400, {"throughput": 400.0, "images": 400.0,
                                                                   "iterations": 10})
    fill_history(box, "box", "AMD EPYC", runs=3, repeats=3, cells=1, seed=5, first_run=1.7e9 + 5 * 86400)
    return team_store(tmp, box)


def test_the_site_plots_and_tests_admitted_repeats_only(not_admitted: Path, tmp_path: Path) -> None:
    publish([not_admitted], tmp_path / "site")
    (page,) = [p.read_text() for p in (tmp_path / "site" / "cells").glob("*.html")]
    assert not re.search(r'<td class="n">[45]\d\d(\.\d+)?</td>', page), "a diverged or refused mean is in the table"
    assert ": 500" not in page and ": 400" not in page, "a diverged or refused figure was plotted"
    assert page.count("<td>3 ok</td>") == 6  # the six admitted nights (the refused one is set aside: no point)
    assert "<td>3 diverged</td>" in page and "regression: here 3 diverged (before 3 ok)" in page
    run_pages = "".join(p.read_text() for p in (tmp_path / "site" / "runs").glob("*.html"))
    assert "3 refused" in run_pages and "500" not in run_pages
