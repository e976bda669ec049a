"""`matrix publish`: a deterministic, escaped static site with histories judged by the history's rule, charts whose
only script ships with the site, and cross-machine verdicts from the compare core."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from runner.base.errors import ConfigError
from runner.publish import publish


def pages(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def specs(page: str) -> dict[str, dict]:
    """Each chart's Vega-Lite spec in a page, by its name (the JSON beside its <div class="vega">)."""
    return {name: json.loads(text) for name, text in
            re.findall(r'<script type="application/json" id="spec-([^"]+)">(.*?)</script>', page, re.S)}


def values(spec: dict) -> list[dict]:
    """The rows of a chart's main data (the points it draws: runner/report/charts.py's dataset DATA)."""
    from runner.report.charts import DATA

    return spec["datasets"][DATA]


def row_of(page: str, text: str) -> str:
    """The table row of `page` that holds `text`."""
    return next(r for r in re.findall(r"<tr>.*?</tr>", page, re.S) if text in r)


def test_same_stores_same_bytes(pooled_db: Path, tmp_path: Path) -> None:
    publish([pooled_db], tmp_path / "one")
    publish([pooled_db], tmp_path / "two")
    first = pages(tmp_path / "one")
    assert first == pages(tmp_path / "two")
    assert len([p for p in first if p.startswith("runs/")]) == 16 and len([p for p in first if p.startswith("cells/")]) == 6


def test_a_second_publish_leaves_no_stale_page(pooled_db: Path, tmp_path: Path) -> None:
    publish([pooled_db], tmp_path / "site")
    (tmp_path / "site" / "runs" / "gone.html").write_text("old")
    publish([pooled_db], tmp_path / "site")
    assert not (tmp_path / "site" / "runs" / "gone.html").exists()


def test_a_folder_that_is_not_a_site_is_never_emptied(pooled_db: Path, tmp_path: Path) -> None:
    mine = tmp_path / "home" / "runs" / "notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("a user's file")
    with pytest.raises(ConfigError, match="not a site `matrix publish` wrote"):
        publish([pooled_db], tmp_path / "home")
    assert mine.read_text() == "a user's file"
    publish([pooled_db], tmp_path / "empty")          # a new folder, and then an empty one, are fine
    (tmp_path / "empty2").mkdir()
    publish([pooled_db], tmp_path / "empty2")


def test_everything_is_escaped_and_nothing_is_fetched(pooled_db: Path, tmp_path: Path) -> None:
    """The only scripts are the site's own (vega.js, charts.js) and each chart's spec as JSON, in which no value can
    end its element; nothing is fetched from a network."""
    publish([pooled_db], tmp_path / "site")
    for name, data in pages(tmp_path / "site").items():
        if not name.endswith(".html"):
            continue
        text = data.decode()
        scripts = re.findall(r"<script[^>]*>", text, re.I)
        assert all(re.fullmatch(r'<script (src="(\.\./)?(vega|charts)\.js"|type="application/json" id="spec-[a-z]+")>', t)
                   for t in scripts), (name, scripts)
        for body in re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', text, re.S):
            assert "<" not in body and ">" not in body and "&" not in body
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text, re.I), name
    index = (tmp_path / "site" / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index and "Intel &lt;Xeon&gt; &amp; &#34;co&#34;" in index
    assert "\\u003cscript\\u003ealert(1)" in index  # in the charts' data too, escaped


def test_links_resolve(pooled_db: Path, tmp_path: Path) -> None:
    publish([pooled_db], tmp_path / "site")
    for page in (tmp_path / "site").rglob("*.html"):
        for href in re.findall(r'(?:href|src)="([^"#]+)"', page.read_text()):
            assert (page.parent / href).resolve().exists(), (page, href)


def test_the_step_is_found_where_it_is_and_nowhere_else(pooled_db: Path, tmp_path: Path) -> None:
    """alpha's cells fell by 25% at its 5th run: by the history's rule (each run against the run before), each of its
    pages has one step there, in the slower colour; beta's histories have none."""
    publish([pooled_db], tmp_path / "site")
    cells = [p.read_text() for p in (tmp_path / "site" / "cells").glob("*.html")]
    stepped = [c for c in cells if "alpha" in c]
    assert len(stepped) == 3
    for c in stepped:
        assert c.count('<td class="worse">step: 1.3') == 1 and "1 step along this history" in c
        assert "20260004-" in row_of(c, '<td class="worse">step:')     # the 5th run, the first after the step
        rings = [v for v in values(specs(c)["history"]) if v["step"]]
        assert len(rings) == 1 and rings[0]["tone"] == "worse"
    assert all("No step along this history" in c and 'class="worse"' not in c for c in cells if "alpha" not in c)


def test_the_index_and_each_cell_page_say_the_same(pooled_db: Path, tmp_path: Path) -> None:
    """The index's verdict against the run before, its colour and the latest figure are the cell page's last row:
    one rule for "changed", one for "newest"."""
    publish([pooled_db], tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    rows = re.findall(r'<tr[^>]*><td><a href="(cells/[^"]+)">.*?<td>([^<]+)</td><td class="n">([^<]+)</td>'
                      r'<td class="(\w+)">([^<]+)</td>', index, re.S)
    assert len(rows) == 6
    for href, machine, latest, tone, words in rows:
        page = (tmp_path / "site" / href).read_text()
        table = page.split(f"<h2>{machine}</h2>", 1)[1]
        last = re.findall(r"<tr><td>.*?</tr>", table, re.S)[-1]
        assert f'<td class="{tone}">{words}</td>' in last, (href, last)
        assert latest.split(" img/s")[0] in last and latest in page


def test_machines_are_compared_by_the_compare_core(pooled_db: Path, tmp_path: Path) -> None:
    """The two machines measured different environments (local-cpu, and one named <script>...): the compare core pairs
    two machines' cells on the environment too, so nothing is paired (it paired them on the params before issue 37);
    tests/analysis/test_identity.py has two machines that share their environments."""
    publish([pooled_db], tmp_path / "site")
    html = (tmp_path / "site" / "machines.html").read_text()
    assert "<table>" not in html and "<h2>A: beta (ce65dd) · B: alpha (d28535)</h2>" in html   # A named first
    assert ("No cell was measured on both machines: pairs need the same environment and params on each, and beta "
            "(ce65dd) has 3 cells that alpha (d28535) lacks, alpha (d28535) 3 that beta (ce65dd) lacks.") in html


def test_a_metric_the_history_cannot_plot_is_refused(pooled_db: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a history plots one of throughput"):
        publish([pooled_db], tmp_path / "site", "iter_time")


def test_cli(pooled_db: Path, tmp_path: Path, matrix_cmd: list[str]) -> None:
    proc = subprocess.run([*matrix_cmd, "publish", "--db", str(pooled_db), "-o", str(tmp_path / "site")],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "index.html" in proc.stdout, proc.stderr
    bad = subprocess.run([*matrix_cmd, "publish", "--db", str(tmp_path / "none.db"), "-o", str(tmp_path / "s")],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 6 and len(bad.stderr.strip().splitlines()) == 1


def test_a_repeat_in_two_stores_counts_once(pooled_db: Path, tmp_path: Path) -> None:
    publish([pooled_db], tmp_path / "one")
    publish([pooled_db, pooled_db.parent / "a.db"], tmp_path / "both")     # a.db's repeats are in pooled_db too
    one, both = pages(tmp_path / "one"), pages(tmp_path / "both")
    assert one.keys() == both.keys()
    strip = re.compile(rb"<footer>.*</footer>", re.S)
    assert all(strip.sub(b"", one[k]) == strip.sub(b"", both[k]) for k in one)


def test_an_empty_store_publishes_an_empty_index(tmp_path: Path) -> None:
    from runner.store import Store
    Store(tmp_path / "empty.db").close()
    files = publish([tmp_path / "empty.db"], tmp_path / "site")
    assert [f.name for f in files] == ["site.css", "vega.js", "charts.js", "index.html"]
    assert (tmp_path / "site" / ".matrix-site").is_file()
    index = (tmp_path / "site" / "index.html").read_text()
    assert "These stores hold no repeat yet: run <code>matrix run</code>, then publish again." in index
    assert "<figure" not in index


def test_a_diverged_value_never_stops_the_site(tmp_path: Path) -> None:
    """Python's json writes NaN and Infinity, which SQLite's JSON functions refuse as malformed."""
    import json

    from runner.store import Store
    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=4, repeats=3, cells=1)
    with Store(db) as store, store.db:
        row = dict(store.db.execute("SELECT * FROM results ORDER BY id DESC LIMIT 1").fetchone())
        for value in (float("nan"), float("inf")):
            row["metrics"] = json.dumps({"throughput": value, "loss_end": float("nan")})
            store.db.execute(f"INSERT INTO results ({', '.join(k for k in row if k != 'id')}) VALUES "
                             f"({', '.join('?' * (len(row) - 1))})", [v for k, v in row.items() if k != "id"])
    publish([db], tmp_path / "site")
    cell = next((tmp_path / "site" / "cells").glob("*.html")).read_text()
    assert len([v for v in values(specs(cell)["history"]) if v["mean"] is not None]) == 4
    assert "nan" not in cell.lower().replace("nano", "") and "inf" not in re.sub(r"<title>.*?</title>", "", cell)


def test_stored_bisect_answers_are_published_escaped_and_linked_to_their_cells(tmp_path: Path) -> None:
    """The site shows every answer `matrix bisect` stored: its outcome in bisect's words, the environments in order
    (each linked to its cell's history where the site has it), the pairs it decided; everything escaped."""
    import json
    import sqlite3

    from runner.store import Store
    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "c.db", "gamma", "AMD EPYC", runs=2, repeats=2, cells=2, seed=5)
    with Store(db) as store:
        keys = sorted({r.cell_key for r in store.rows()})
        assert store.bisects() == []
        answer = {"kind": "matrix-bisect", "outcome": "found", "why": "<b>v1 -> v2</b> is slower", "metric": "throughput",
                  "cell": "mnist_cnn fp32 <script>alert(1)</script>", "threshold": 0.05, "environments": ["v1", "v2"],
                  "culprit": {"a": "v1", "b": "v2", "verdict": "fail", "why": "1.20x slower", "change": -0.2,
                              "p_value": 0.001},
                  "decisions": [{"a": "v1", "b": "v2", "verdict": "fail", "why": "1.20x slower", "change": -0.2,
                                 "p_value": 0.001}],
                  "cost": {"repeats": 6, "full_sweep": 6}, "mean": float("nan")}
        store.add_bisect(answer, keys, ["matrix", "bisect", "--images", "<x>"], 1.8e9, 1.8e9 + 60)
        kept = store.bisects()
    assert len(kept) == 1 and kept[0]["cell_keys"] == keys and kept[0]["answer"]["why"] == answer["why"]
    publish([db], tmp_path / "site")
    page = (tmp_path / "site" / "bisects.html").read_text()
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;v1 -&gt; v2&lt;/b&gt;" in page and "&lt;x&gt;" in page
    links = re.findall(r'href="cells/([^"]+)\.html">v[12]<', page)
    assert len(links) == 4 and all((tmp_path / "site" / "cells" / f"{s}.html").is_file() for s in links)
    assert 'href="bisects.html"' in (tmp_path / "site" / "index.html").read_text()
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):  # as results are
        with Store(db) as store:
            store.db.execute("DELETE FROM bisects")
    # a store without answers publishes no bisects page, and a stale one from an earlier publish goes
    other = fill_history(tmp_path / "d.db", "delta", "AMD EPYC", runs=2, repeats=2, cells=1, seed=6)
    publish([other], tmp_path / "site")
    assert not (tmp_path / "site" / "bisects.html").exists()
    assert json.loads(json.dumps(kept[0]["argv"])) == ["matrix", "bisect", "--images", "<x>"]


def test_a_run_that_ran_out_of_memory_is_on_the_cells_history_as_a_change(tmp_path: Path) -> None:
    """The site's histories read only ok repeats: a night whose repeats all ran out of memory vanished from the
    cell's page, which then said "No change found along this history". Its outcomes are listed and compared with
    the run before as the decision core compares a pair's outcomes."""
    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "o.db", "gamma", "AMD EPYC", runs=4, repeats=3, cells=1, seed=9,
                      oom_runs=frozenset({2}))
    publish([db], tmp_path / "site")
    (page,) = [p.read_text() for p in (tmp_path / "site" / "cells").glob("*.html")]
    assert "No change found" not in page
    assert page.count("<td>3 oom</td>") == 1 and page.count("<td>3 ok</td>") == 3
    assert "regression: here 3 oom (before 3 ok)" in page and "fixed: before 3 oom (here 3 ok)" in page
    index = (tmp_path / "site" / "index.html").read_text()
    assert re.search(r'<td class="n">4</td><td class="n">2</td></tr>', index)  # 4 runs, 2 changes
    # The index says the last run against the one before in the core's words: it came back from out of memory.
    assert re.search(r'<td class="better">step: fixed: before 3 oom \(here 3 ok\)', index)


def _damaged_bisect(db: Path, **cols: str) -> None:
    import json
    import sqlite3

    answer = {"kind": "matrix-bisect", "outcome": "found", "why": "w", "metric": "throughput", "cell": "c",
              "environments": ["v1", "v2"], "decisions": [], "cost": {"repeats": 6, "full_sweep": 6}}
    row = {"schema": "1", "started_at": "1.8e9", "finished_at": "1.8e9", "host": "'h'", "argv": "'[\"m\"]'",
           "metric": "'t'", "outcome": "'found'", "cell_keys": "'[]'", "answer": repr(json.dumps(answer)), **cols}
    with sqlite3.connect(db) as con:
        con.execute("DELETE FROM bisects")
        con.execute(f"INSERT INTO bisects ({', '.join(row)}) VALUES ({', '.join(row.values())})")


@pytest.mark.parametrize("cols", [{"finished_at": "'abc'"}, {"started_at": "1e30"},
                                  {"answer": "'{\"environments\": 5}'"}, {"answer": "'{\"decisions\": 5}'"},
                                  {"answer": "'{\"culprit\": [1, 2]}'"}, {"answer": "'{\"environments\": \"v1\"}'"}])
def test_a_damaged_bisect_row_is_one_store_error_not_a_traceback(tmp_path: Path, cols: dict[str, str]) -> None:
    """A bisect row whose finished_at is text, whose start is past any date, or whose environments or decisions are
    not lists was a ValueError, OverflowError or TypeError traceback from publish (or a list of single letters)."""
    from runner.base.errors import StoreError
    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "c.db", "gamma", "AMD EPYC", runs=2, repeats=2, cells=1, seed=5)
    _damaged_bisect(db, **cols)
    with pytest.raises(StoreError, match="bisect answer 1 is not one `matrix bisect` wrote"):
        publish([db], tmp_path / "site")


def test_a_result_stored_past_any_date_is_published_without_its_date(tmp_path: Path) -> None:
    """A result row whose started_at is past a date (1e30: a damaged or hand-made store) made publish an
    OverflowError traceback from the machine's 'last' date."""
    import sqlite3

    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "c.db", "gamma", "AMD EPYC", runs=2, repeats=2, cells=1, seed=5)
    with sqlite3.connect(db) as con:
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='trigger' AND tbl_name='results'"):
            con.execute(f"DROP TRIGGER {name}")
        con.execute("UPDATE results SET started_at=1e30 WHERE id=(SELECT max(id) FROM results)")
    publish([db], tmp_path / "site")
    assert (tmp_path / "site" / "index.html").is_file()


def test_each_cell_is_labelled_in_its_own_unit(tmp_path: Path) -> None:
    """The site labelled every cell with one unit, the commonest among repeats that state one: beside a store of
    tok/s repeats, an image model's history that never stated a unit (img/s) was headed tok/s."""
    from tests.store.synthetic import fill_history

    images = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=3, repeats=3, cells=1, seed=1)
    tokens = fill_history(tmp_path / "b.db", "beta", "Intel", runs=3, repeats=2, cells=1, seed=2, environment="llm",
                          definitions={"throughput": {"how": "tokens over the window", "unit": "tok/s"}})
    publish([images, tokens], tmp_path / "site")
    heads = {}
    for page in (tmp_path / "site" / "cells").glob("*.html"):
        text = page.read_text()
        heads[re.findall(r"<h1>(\S+) ·", text)[0]] = re.findall(r"History of throughput \(([^)]*)\)", text)
    assert heads == {"local-cpu": ["img/s"], "llm": ["tok/s"]}
    assert "figures are throughput (img/s | tok/s)" in (tmp_path / "site" / "index.html").read_text()


def test_two_copies_of_a_store_keep_each_ones_later_bisect_answers(tmp_path: Path) -> None:
    """Answers were told apart by (store id, row id) only: a copy of a store shares its id, so the answer each copy
    stored after the copy (row 2 in both) was published once, the other one dropped without a word."""
    import shutil

    from runner.store import Store
    from tests.store.synthetic import fill_history

    first = fill_history(tmp_path / "a.db", "alpha", "AMD EPYC", runs=2, repeats=2, cells=1, seed=5)
    answer = {"outcome": "found", "why": "w", "metric": "throughput", "cell": "c", "environments": ["v1", "v2"]}
    with Store(first) as store:
        store.add_bisect({**answer, "why": "before the copy"}, [], ["matrix", "bisect"], 1.8e9, 1.8e9 + 1)
    copy = tmp_path / "copy.db"
    shutil.copy(first, copy)
    for db, why, t in ((first, "only in the first", 1.9e9), (copy, "only in the copy", 1.91e9)):
        with Store(db) as store:
            store.add_bisect({**answer, "why": why}, [], ["matrix", "bisect"], t, t + 1)
    publish([first, copy], tmp_path / "site")
    page = (tmp_path / "site" / "bisects.html").read_text()
    assert page.count("before the copy") == 1
    assert "only in the first" in page and "only in the copy" in page


def test_a_bisect_change_is_shown_as_bisect_printed_it(tmp_path: Path) -> None:
    """+100% was shown as `change 1` (the raw b/a - 1); the page says it as bisect and the other pages do."""
    from runner.store import Store
    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "c.db", "gamma", "AMD EPYC", runs=2, repeats=2, cells=1, seed=5)
    pair = {"a": "v1", "b": "v2", "verdict": "fail", "why": "+100.0% beyond ±5%", "change": 1.0, "p_value": 0.001}
    slower = {**pair, "a": "v2", "b": "v3", "change": -0.2}
    answer = {"kind": "matrix-bisect", "outcome": "spread", "why": "two steps", "metric": "throughput", "cell": "c",
              "threshold": 0.05, "environments": ["v1", "v2", "v3"], "culprit": None, "decisions": [pair, slower]}
    with Store(db) as store:
        store.add_bisect(answer, [], ["matrix", "bisect"], 1.8e9, 1.8e9 + 60)
    publish([db], tmp_path / "site")
    cells = re.findall(r'<td class="n">([^<]*)</td>', (tmp_path / "site" / "bisects.html").read_text())
    assert "+100.0% (2.00x faster)" in cells and "-20.0% (1.25x slower)" in cells, cells
    assert "1" not in cells


def test_after_a_clock_set_back_the_newest_run_is_the_stores(tmp_path: Path) -> None:
    """Publish named the older run "latest" when the newer one's clock read earlier; compare and the report take the
    store's order. A run stored last, with a start before every other, is still the cell's latest on every page."""
    import sqlite3

    from tests.store.synthetic import fill_history

    db = fill_history(tmp_path / "c.db", "box", "AMD EPYC", runs=3, repeats=3, cells=1, seed=4)
    con = sqlite3.connect(db)
    last = con.execute("SELECT run_id FROM runs ORDER BY started_at DESC").fetchone()[0]
    cols = [r[1] for r in con.execute("PRAGMA table_info(results)") if r[1] != "id"]
    con.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, argv, host, "
                "status) SELECT '20250101-000000-c10ck0', schema, 1.0e9, 1.0e9 + 60, matrix_path, matrix_name, argv, "
                "host, status FROM runs WHERE run_id=?", (last,))
    for row in con.execute(f"SELECT {', '.join(cols)} FROM results WHERE run_id=?", (last,)).fetchall():
        r = dict(zip(cols, row, strict=True))
        r.update(run_id="20250101-000000-c10ck0", started_at=1.0e9 + r["repeat"],
                 metrics=json.dumps({**json.loads(r["metrics"]), "throughput": 50.0 + r["repeat"], "images": 50.0 + r["repeat"]}))
        con.execute(f"INSERT INTO results ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [r[c] for c in cols])
    con.commit()
    con.close()
    publish([db], tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<td class="n">52.0 ± 1.0 img/s (n=3;' in index and re.search(r'<td class="worse">step: 1.9\dx slower', index)
    runs = re.findall(r'<a href="runs/[^"]+">([^<]+)</a>', index)
    assert runs[0] == "20250101-000000-c10ck0"                     # newest first, by the store
    (page,) = [p.read_text() for p in (tmp_path / "site" / "cells").glob("*.html")]
    assert "20250101-000000-c10ck0" in re.findall(r"<tr><td>.*?</tr>", page, re.S)[-1]


def test_each_row_gets_its_own_groups_value_after_rows_were_dropped() -> None:
    """The site names runs and cells per group after dropping the repeats read from two stores: the groups' first rows
    were looked up by index label as if labels were positions, which crashed on four stores and could name a row after
    another group."""
    import pandas as pd

    from runner.publish.model import _per_group

    df = pd.DataFrame({"k": ["a", "b", "a", "c", "b", "d", None], "o": [1, 1, 1, 2, 1, 2, 2]},
                      index=[0, 5, 9, 2, 40, 3, 1])  # labels as dropping leaves them: gaps, out of order
    for part in (df, df.iloc[2:], df.iloc[[6, 0, 3]]):
        got = _per_group(part, ["k", "o"], lambda k, o: f"{k}-{o}")
        assert got == [f"{k}-{o}" for k, o in zip(part["k"], part["o"], strict=True)]
    assert _per_group(df.iloc[0:0], ["k", "o"], lambda k, o: 1) == []
