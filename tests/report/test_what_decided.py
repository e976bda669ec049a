"""A pair's colour, sentence and place in the answer come from what decided it.

A review found pairs that read the opposite of their verdict: B newly out of memory in 6 of 10 repeats, its 4 ok
repeats 1.26x faster, was decided a regression by the rate of failures, yet the answer said "B is 1.26x faster" in
green; a pair unsupported on both sides was counted "the same within ±2%"; two pairs 1.5x apart in opposite
directions gave a geometric mean "the same within ±2%"; a new failure mode on both sides at equal rates passed the
gate. These tests hold every surface (compare's tables, CSV and JSON, the report's answer, its JSON and HTML) to
the verdict's own reason."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
from hypothesis import HealthCheck, given, settings

from runner import analysis as an
from runner.analysis import gate
from runner.analysis.comparable import Outcomes, outcome_change
from runner.analysis.verdict import Verdict
from runner.domain.cells import stable_hash
from runner.record.stored import StoredRepeat
from runner.report import answer, report_command
from runner.report import tone as tones
from runner.report.render import compare_csv, compare_json, compare_markdown, compare_terminal
from runner.store import SCHEMA, Store
from tests.analysis.test_agreement import rows as agreement_rows
from tests.analysis.test_agreement import side

PARAMS = {"model": "mnist_cnn", "precision": "fp32", "batch_size": 32, "dataset": "synthetic"}


def repeats(env: str, spec: list[Any], start: int = 0, **over: Any) -> list[dict[str, Any]]:
    """Stored rows of one cell: a number is an ok repeat at that throughput, a word a repeat that ended so."""
    params = {**PARAMS, **over}
    out = []
    for i, v in enumerate(spec):
        ok = not isinstance(v, str)
        out.append({"id": start + i, "run_id": "20260101-000000-aaaaaa", "cell_key": stable_hash([env, params]),
                    "repeat": i, "environment": env, "backend": "local", "params": params,
                    "status": "ok" if ok else v, "reason": None if ok else v,
                    "metrics": {"throughput": float(v), "window_s": 2.0} if ok else {},
                    "started_at": float(start + i)})
    return out


def comparison(rows: list[dict[str, Any]]) -> an.Comparison:
    df = an.frame(an.StoredRepeat.many(rows))
    return an.compare(an.select_side(df, "A"), an.select_side(df, "B"))


def store(db: Path, rows: list[dict[str, Any]]) -> Path:
    with Store(db) as s, s.db:
        for i, run in enumerate(dict.fromkeys(r["run_id"] for r in rows)):
            s.db.execute("INSERT INTO runs (run_id, schema, started_at, finished_at, matrix_path, matrix_name, argv,"
                         " host, status) VALUES (?, ?, ?, ?, 'm.yaml', 'm', '[]', 'h', 'complete')",
                         (run, SCHEMA, 1.7e9 + i * 86400, 1.7e9 + i * 86400))
        for r in rows:
            s.db.execute("INSERT INTO results (schema, run_id, cell_key, repeat, environment, backend, tags, params,"
                         " status, reason, metrics, env, raw, log_tail, started_at, finished_at)"
                         " VALUES (?, ?, ?, ?, ?, ?, '[]', ?, ?, ?, ?, '{}', NULL, '', ?, ?)",
                         (SCHEMA, r["run_id"], r["cell_key"], r["repeat"], r["environment"], r["backend"],
                          json.dumps(r["params"]), r["status"], r["reason"], json.dumps(r["metrics"]),
                          1.7e9 + r["started_at"], 1.7e9 + r["started_at"] + 1))
    return db


REGRESSION = repeats("A", [100.0 + i for i in range(10)]) + repeats("B", [130.0 + i for i in range(4)] + ["oom"] * 6, 100)
FIXED = repeats("A", [130.0 + i for i in range(4)] + ["oom"] * 6) + repeats("B", [100.0 + i for i in range(10)], 100)


def test_a_regression_of_outcomes_reads_as_one_on_every_surface_whatever_the_ok_repeats_ratio(tmp_path: Path) -> None:
    c = comparison(REGRESSION)
    (pair,) = c.pairs.to_dict("records")
    assert pair["decision"] == "fail" and pair["decided_by"] == "outcomes" and pair["ratio"] > 1.2
    assert tones.of_pair(pair, c.metric) is tones.Tone.WORSE
    said = tones.pair_said(pair, c.metric, "B", "A")
    assert said.sentence.startswith("B against A: regression: B 4 ok, 6 oom") and "faster" not in said.sentence
    assert json.loads(compare_json(c))["pairs"][0]["tone"] == "worse"
    assert pd.read_csv(__import__("io").StringIO(compare_csv(c)))["tone"].tolist() == ["worse"]
    md = compare_markdown(c)
    row = next(line for line in md.splitlines() if line.startswith("| mnist_cnn"))
    assert "of the ok repeats" in row and "<0.001" not in row  # the speed test's p is not what decided
    assert "(1 regression): this mean of the repeats that delivered decides nothing" in md

    out = tmp_path / "r"
    report_command(store(tmp_path / "s.db", REGRESSION), None, ["md", "html", "json"], out)
    finding = json.loads((out / "report.json").read_text())["answer"]["findings"][0]
    assert (finding["tone"], finding["decision"]) == ("worse", "fail") and "regression" in finding["sentence"]
    assert finding["ratio"] is None and finding["p"] is None  # not charted as a speed, no speed p as its own
    md = (out / "report.md").read_text()
    answer_part = md[md.index("## The answer"):].split("\n## ", 1)[0]
    assert "regression: B 4 ok, 6 oom" in answer_part and "faster" not in answer_part
    html = (out / "report.html").read_text()
    assert re.search(r'<li class="worse">[^<]*regression', html), "the answer's sentence is red, not green"
    assert not re.search(r'class="better"[^>]*>[^<]*regression', html)


def test_a_fix_of_outcomes_reads_better_though_its_ok_repeats_are_slower() -> None:
    c = comparison(FIXED)
    (pair,) = c.pairs.to_dict("records")
    assert pair["decided_by"] == "outcomes" and pair["ratio"] < 0.8
    assert tones.of_pair(pair, c.metric) is tones.Tone.BETTER
    assert "slower" not in tones.pair_said(pair, c.metric, "B", "A").sentence


def test_unsupported_on_both_sides_is_not_compared_never_the_same(tmp_path: Path) -> None:
    c = comparison(repeats("A", ["unsupported"] * 2) + repeats("B", ["unsupported"] * 2, 100))
    (pair,) = c.pairs.to_dict("records")
    assert pair["decision"] == "pass"  # the gate's rule: nothing to compare fails nothing
    assert tones.of_pair(pair, c.metric) is tones.Tone.NONE
    found = answer.build([answer.Compared("environment", "A", "B", c.pairs, "pairs")], pd.DataFrame(), c.metric, "")
    assert found.headline.endswith("0 changed, 0 the same within ±2%, 0 undecided, 1 not compared (nothing measured "
                                   "on either side).")
    assert "unsupported on both sides" in found.findings["sentence"][0]


def test_a_new_failure_mode_on_b_at_the_rate_a_had_its_own_is_undecided_and_no_repeats_promised() -> None:
    ok = [100.0, 101.0, 99.0, 100.0, 101.0]
    for a_bad, b_bad in (("oom", "timeout"), ("oom", "failed")):
        rows = repeats("A", ok + [a_bad] * 5) + repeats("B", ok + [b_bad] * 5, 100)
        oc = outcome_change(Outcomes.parse("5 ok, 5 " + a_bad), Outcomes.parse("5 ok, 5 " + b_bad))
        assert oc is not None and oc.direction == "worse" and oc.verdict is Verdict.UNDECIDED
        assert "cannot tell apart" in oc.why and "more repeats needed" not in oc.why
        df = an.frame(an.StoredRepeat.many(rows))
        (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"],
                                 [gate.Rule("slower", 0.03)])
        assert check.verdict is Verdict.UNDECIDED and check.needed is None, check.reason
        (pair,) = comparison(rows).pairs.to_dict("records")
        assert pair["decision"] == "undecided" and pair["needed"] is None


def test_a_new_failure_mode_on_b_is_feared_though_a_failed_more_often_its_own_way() -> None:
    """A 5 ok, 5 oom; B 6 ok, 4 timeout: B's timeout is new, and the gate passed it because A failed more often."""
    ok = [100.0, 101.0, 99.0, 100.0, 101.0]
    for a_spec, b_spec in ((ok + ["oom"] * 5, ok + [100.0] + ["timeout"] * 4),
                           (ok + ok[:4] + ["oom"] * 2, ok + ok[:4] + ["timeout"])):
        rows = repeats("A", a_spec) + repeats("B", b_spec, 100)
        df = an.frame(an.StoredRepeat.many(rows))
        (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"],
                                 [gate.Rule("slower", 0.03)])
        assert check.verdict is Verdict.UNDECIDED and "timeout on B only" in check.reason, check.reason
        (pair,) = comparison(rows).pairs.to_dict("records")
        assert pair["decision"] == "undecided" and "timeout on B only" in pair["verdict"]
    # B failing significantly less often in all is a fix, its one new way of failing said beside it.
    oc = outcome_change(Outcomes.parse("2 ok, 8 oom"), Outcomes.parse("9 ok, 1 timeout"))
    assert oc is not None and oc.direction == "better" and oc.verdict is Verdict.FAIL


def test_a_mean_over_opposite_changes_is_never_said_to_be_the_same() -> None:
    rows = (repeats("A", [100 * (1 + 0.002 * i) for i in range(5)], batch_size=32)
            + repeats("B", [150 * (1 + 0.002 * i) for i in range(5)], 100, batch_size=32)
            + repeats("A", [100 * (1 + 0.002 * i) for i in range(5)], 200, batch_size=64)
            + repeats("B", [66.6667 * (1 + 0.002 * i) for i in range(5)], 300, batch_size=64))
    md = compare_markdown(comparison(rows))
    mean = next(line for line in md.splitlines() if line.startswith("**Geometric mean"))
    assert "the same within" not in mean and "the pairs disagree, 1 faster and 1 slower" in mean


def test_a_mean_without_an_interval_decides_nothing() -> None:
    md = compare_markdown(comparison(repeats("A", [100.0]) + repeats("B", [200.0], 100)))
    mean = next(line for line in md.splitlines() if line.startswith("**Geometric mean"))
    assert "2.00x faster" in mean and "no 95% interval" in mean and "decides nothing" in mean


def test_compare_says_its_answer_before_its_method_and_tables() -> None:
    c = comparison(REGRESSION)
    for text in (compare_markdown(c), compare_terminal(c, color=False, width=200)):
        head = text.index("1 comparison of throughput: 1 changed")
        assert head < text.index("Metric: throughput") < text.index("Environments")
        assert text.index("regression: B 4 ok, 6 oom") < text.index("Metric: throughput")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=side(), b=side())
def test_no_pair_reads_against_what_decided_it(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Any two sides (statuses, levels, noise and definitions drawn): a pair its outcomes decided takes the outcomes'
    direction and words, never its ok repeats' speed; 'the same' only over a measured interval inside ±2%; a pass
    with nothing measured is not compared."""
    if not a["statuses"] or not b["statuses"]:
        return
    df = an.frame(StoredRepeat.many(agreement_rows("A", a, 0) + agreement_rows("B", b, 100)))
    c = an.compare(an.select_side(df, "A"), an.select_side(df, "B"))
    for pair in c.pairs.to_dict("records"):
        t = tones.of_pair(pair, c.metric)
        sentence = tones.pair_said(pair, c.metric, "B", "A").sentence
        if pair["decided_by"] == "outcomes":
            oc = outcome_change(Outcomes.parse(pair["a_statuses"]), Outcomes.parse(pair["b_statuses"]))
            assert oc is not None
            if pair["decision"] == "fail" and oc.direction:
                assert t.value == oc.direction, (pair["verdict"], t)
            assert " faster than " not in sentence and " slower than " not in sentence, sentence
            assert pair["needed"] is None
        if t is tones.Tone.SAME:
            assert 1 / 1.02 <= pair["ratio_low"] <= pair["ratio_high"] <= 1.02, pair
        if pair["decision"] == "pass" and not pair["ratio"] == pair["ratio"]:
            assert t is tones.Tone.NONE


def test_a_window_s_length_is_compared_only_between_windows_of_as_many_iterations() -> None:
    """iterations: auto calibrates each window to its target time: B twice as fast ran 66 iterations in the ~1.05 s A
    took for 33, and `compare --metric time` called the pair the same. The time is the window's length: it measures
    speed only against a window of as many iterations."""
    def side_rows(env: str, tput: float, iters: int, start: int) -> list[dict[str, Any]]:
        rows = repeats(env, [tput * (1 + 0.005 * i) for i in range(5)], start)
        for r in rows:
            r["metrics"].update(window_s=32 * iters / r["metrics"]["throughput"], iterations=iters, images=32 * iters)
        return rows

    time = an.get_metric("time")
    df = an.frame(an.StoredRepeat.many(side_rows("A", 1000.0, 33, 0) + side_rows("B", 2000.0, 66, 100)))
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B"), time).pairs.to_dict("records")
    assert pair["decision"] == "undecided" and "windows of different numbers of iterations (33 vs 66" in pair["verdict"]
    df = an.frame(an.StoredRepeat.many(side_rows("A", 1000.0, 33, 0) + side_rows("B", 2000.0, 33, 100)))
    (pair,) = an.compare(an.select_side(df, "A"), an.select_side(df, "B"), time).pairs.to_dict("records")
    assert pair["decision"] == "fail" and pair["verdict"] == "faster"  # as many iterations: half the time


def test_the_footer_and_the_mean_count_each_pair_by_what_decided_it() -> None:
    ok10 = [100.0, 101.0, 99.0, 100.0, 101.0, 100.0, 99.0, 101.0, 100.0, 100.0]
    # One pair faster by its metric, one fixed by its failures though its ok repeats are 2x slower.
    rows = (repeats("A", ok10[:5]) + repeats("B", [130.0, 131.0, 129.0, 130.0, 131.0], 100)
            + repeats("A", ok10[:4] + ["oom"] * 6, 200, batch_size=64)
            + repeats("B", [50.0, 51.0, 49.0, 50.0, 51.0, 50.0, 50.0, 51.0, 49.0, 50.0], 300, batch_size=64))
    c = comparison(rows)
    md = compare_markdown(c)
    mean = next(line for line in md.splitlines() if line.startswith("**Geometric mean"))
    assert "a change beyond" not in mean and "(1 fix): this mean of the repeats that delivered decides nothing" in mean
    assert "1 of 2 pairs significant (Welch's" in mean and "1 changed in its failures (Fisher's" in mean
    csv = pd.read_csv(__import__("io").StringIO(compare_csv(c)))
    assert csv.loc[csv["decided_by"] == "outcomes", "change"].tolist() == ["2.00x slower, of the ok repeats"]
    # Unsupported on both: not compared in the footer too, never "the same".
    md = compare_markdown(comparison(repeats("A", ["unsupported"] * 2) + repeats("B", ["unsupported"] * 2, 100)))
    mean = next(line for line in md.splitlines() if line.startswith("**"))
    assert "the same" not in mean.split("No geometric mean")[-1] and "1 not compared" in mean


def test_a_change_its_metric_decided_says_the_failures_few_repeats_cannot_tell_from_chance() -> None:
    c = comparison(repeats("A", [100.0, 101, 102, 100, 101, 99, 100, 101, 102, 100])
                   + repeats("B", [130.0, 131, 129, 130, 131, 130, 129, 131, 130, "oom"], 100))
    (pair,) = c.pairs.to_dict("records")
    sentence = tones.pair_said(pair, c.metric, "B", "A").sentence
    assert sentence.startswith("B is 1.29x faster than A") and "oom on B only" in sentence


def test_an_undecided_pair_says_its_repeats_needed_once() -> None:
    c = comparison(repeats("A", [100.0, 101.0, 99.0]) + repeats("B", [100.0, 101.0, 99.5], 100))
    (pair,) = c.pairs.to_dict("records")
    sentence = tones.pair_said(pair, c.metric, "B", "A").sentence
    assert sentence.count("repeats a side would decide") == 1, sentence


def test_a_step_of_the_history_its_failures_decided_reads_more_failures_not_slower(tmp_path: Path) -> None:
    """The same cell, the run before at 100 img/s, the latest 4 ok at 130 and 6 out of memory: the history's step is
    the failures', so its ring and the site say 'more failures', never 'slower' (nor 'faster')."""
    from runner.publish import publish

    before = repeats("A", [100.0, 101, 99, 100, 101, 100, 99, 101, 100, 100])
    latest = [dict(r, run_id="20260102-000000-bbbbbb", started_at=r["started_at"] + 86400)
              for r in repeats("A", [130.0, 131, 129, 130] + ["oom"] * 6, 100)]
    db = store(tmp_path / "h.db", before + latest)
    out = tmp_path / "r"
    report_command(db, None, ["html"], out)
    html = (out / "report.html").read_text()
    rings = re.findall(r'"stroke": \{"field": "verdict", "scale": \{"domain": (\[[^]]*\])', html)
    assert rings == ['["more failures"]'], rings
    assert '"verdict": "slower"' not in html and "(p=0.011)" not in html  # the rate test's p said once
    site = tmp_path / "site"
    publish([db], site)
    index = (site / "index.html").read_text()
    assert "0 faster, 0 slower, 1 with more failures" in index


def test_a_tripped_check_says_the_change_of_failures_beside_it_whatever_the_rule_fears() -> None:
    for rows, rule, said in ((FIXED, gate.Rule("slower", 0.03), "fixed: A 4 ok, 6 oom"),
                             (REGRESSION, gate.Rule("faster", 0.10), "regression: B 4 ok, 6 oom")):
        df = an.frame(an.StoredRepeat.many(rows))
        (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [rule])
        assert check.verdict is Verdict.FAIL and said in check.reason, check.reason


def two_runs(spec_before: dict[str, list[Any]], spec_latest: dict[str, list[Any]]) -> list[dict[str, Any]]:
    rows, start = [], 0
    for run, spec, shift in (("20260101-000000-aaaaaa", spec_before, 0), ("20260102-000000-bbbbbb", spec_latest, 86400)):
        for env, values in spec.items():
            rows += [dict(r, run_id=run, started_at=r["started_at"] + shift) for r in repeats(env, values, start)]
            start += 100
    return rows


def test_the_site_counts_every_cell_once_whatever_its_failures_did(tmp_path: Path) -> None:
    """oom then timeout is 'other outcomes', never dropped; oom twice and unsupported twice were measured twice,
    never 'measured once'; the counts add up to the cells."""
    from runner.publish import publish

    rows = two_runs({"A": ["oom"] * 3, "B": [100.0, 101, 99, 100, 101], "C": [100.0, 101, 99], "D": ["oom"] * 3},
                    {"A": ["timeout"] * 3, "B": [100.0, 101, 99, 100, 101], "C": [100.0, 101, 99.5], "D": ["oom"] * 3})
    site = tmp_path / "site"
    publish([store(tmp_path / "s.db", rows)], site)
    head = re.search(r"Against the run before, of (\d+) cells[^<]*", (site / "index.html").read_text())
    assert head is not None, "no headline"
    said = head.group(0)
    assert head.group(1) == "4" and "measured once" not in said, said
    counted = sum(int(n) for n in re.findall(r"(\d+) (?:faster|slower|with|the same|undecided)", said))
    assert counted == 4 and "1 with other outcomes" in said and "1 with nothing measured to compare" in said, said


def test_the_precision_summary_leaves_a_ratio_its_failures_decided_uncoloured(tmp_path: Path) -> None:
    rows = (repeats("E", [100.0, 101, 99, 100, 101, 100, 99, 101, 100, 100])
            + repeats("E", [150.0, 151, 149, 150] + ["oom"] * 6, 100, precision="bf16"))
    out = tmp_path / "r"
    report_command(store(tmp_path / "s.db", rows), None, ["html"], out)
    html = (out / "report.html").read_text()
    assert re.search(r'<td class="num none r">1\.50x</td>', html) and not re.search(r'class="num (?:worse|better) r">1\.50x', html)


def test_a_mean_beside_a_pair_its_failures_hold_undecided_decides_nothing() -> None:
    ok10 = [100.0, 101, 99, 100, 101, 100, 99, 101, 100, 100]
    rows = (repeats("A", ok10) + repeats("B", ok10[:9] + ["oom"], 100)
            + repeats("A", ok10, 200, batch_size=64) + repeats("B", ok10, 300, batch_size=64))
    mean = next(line for line in compare_markdown(comparison(rows)).splitlines() if line.startswith("**Geometric"))
    assert "the same within" not in mean.split(";")[0] and "(1 held undecided by failures)" in mean, mean


def test_a_gate_check_its_failures_decided_shows_no_speed_p_and_says_what_decided() -> None:
    df = an.frame(an.StoredRepeat.many(REGRESSION))
    (check,) = gate.evaluate(df[df["environment"] == "A"], df[df["environment"] == "B"], [gate.Rule("slower", 0.03)])
    assert check.verdict is Verdict.FAIL and check.by_failures and check.as_json()["decided_by"] == "outcomes"
    (row,) = gate.rows([check])
    assert row["p"] == "—" and row["why"].startswith("regression: B 4 ok, 6 oom")
