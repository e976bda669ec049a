"""References in matrix.yaml: parsing, validation errors, and every verdict."""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import pytest

from runner import matrix
from runner.analysis import references as ref
from runner.analysis.verdict import Verdict
from runner.base.errors import ConfigError
from runner.base.exitcodes import Exit
from tests.analysis.helpers import long_frame, rows_for

BASE = """
environments: [{name: cpu, backend: local}]
axes: {model: [mnist_cnn, wrn], precision: [fp32, bf16]}
"""


def parse(extra: str) -> matrix.Matrix:
    return matrix.parse(textwrap.dedent(BASE) + textwrap.dedent(extra), Path("m.yaml"))


def error_of(extra: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse(extra)
    return str(e.value)


@pytest.mark.parametrize(("text", "low", "high", "shown"), [
    (">= 3000", 3000, math.inf, ">= 3000"),
    ("<= 2048", -math.inf, 2048, "<= 2048"),
    ("2790 ± 5%", 2650.5, 2929.5, "2790 ± 5%"),
    ("2790 +- 10", 2780, 2800, "2790 ± 10"),
    ({"min": 10, "max": 20}, 10, 20, ">= 10 and <= 20"),
    ({"value": 100, "tolerance": "1%"}, 99, 101, "100 ± 1%"),
])
def test_bounds_parse_long_and_short_forms(text: object, low: float, high: float, shown: str) -> None:
    b = ref.parse_bound(text)
    assert (b.low, b.high, b.text()) == (pytest.approx(low), pytest.approx(high), shown)


def test_references_parse_into_the_matrix_with_metric_aliases() -> None:
    m = parse("""
        references:
          - match: {model: wrn, precision: [fp32, bf16]}
            throughput: ">= 100"
            memory: {max: 512}
          - {throughput: "50 ± 10%"}
    """)
    first, second = m.references
    assert dict(first.match) == {"model": ("wrn",), "precision": ("fp32", "bf16")}
    assert set(first.bounds) == {"throughput", "peak_mem"}
    assert sum(first.matches(c) for c in m.cells()) == 2
    assert all(second.matches(c) for c in m.cells())


@pytest.mark.parametrize(("extra", "expected"), [
    ("references:\n  - {match: {model: wrn}, speed: '>= 1'}",
     "m.yaml: references[0].speed (line 5): unknown metric 'speed'; known metrics: throughput"),
    ("references:\n  - {match: {modle: wrn}, throughput: '>= 1'}",
     "m.yaml: references[0].match.modle (line 5): unknown key 'modle'; allowed: environment, model"),
    ("references:\n  - {match: {model: resnet50}, throughput: '>= 1'}",
     "m.yaml: references[0].match (line 5): model=resnet50 matches no cell of the matrix; values that "
     "exist: model: mnist_cnn, wrn"),
    ("references:\n  - {match: {environment: gpu}, throughput: '>= 1'}",
     "matches no cell of the matrix; values that exist: environment: cpu"),
    ("references:\n  - {throughput: fast}", "m.yaml: references[0].throughput (line 5): 'fast' is not a reference"),
    ("references:\n  - {throughput: {min: 1, value: 2}}", "give either value (± tolerance) or min/max"),
    ("references:\n  - {throughput: {value: 2, tol: 1}}",
     "references[0].throughput.tol (line 5): unknown key 'tol'; allowed: min, max, value, tolerance"),
    ("references:\n  - {match: {model: wrn}}", "references[0] (line 5): no metric to check"),
    ("references: {throughput: 1}", "references (line 4): expected a list"),
])
def test_a_wrong_reference_is_one_line_naming_file_and_field(extra: str, expected: str) -> None:
    err = error_of(extra)
    assert expected in err
    assert len(err.splitlines()) == 1


def test_every_mistake_is_reported_at_once() -> None:
    err = error_of("references:\n  - {speed: 1}\n  - {match: {modle: x}, throughput: '>= 1'}\n")
    assert len(err.splitlines()) == 2


def cells_and_frame(values_wrn: list[float], status: str = "ok") -> tuple[matrix.Matrix, object]:
    m = parse("""
        references:
          - match: {model: wrn, precision: fp32}
            throughput: ">= 100"
    """)
    wrn = next(c for c in m.cells() if c.params["model"] == "wrn" and c.params["precision"] == "fp32")
    return m, long_frame(rows_for(wrn.key, values_wrn, status=status, model="wrn"))


def test_verdict_pass_with_measured_value_reference_and_margin() -> None:
    m, df = cells_and_frame([110.0, 112.0, 108.0])
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.PASS
    assert v.measured == pytest.approx(110.0)
    assert v.margin == pytest.approx(0.10)
    assert v.expected == ">= 100" and v.n == 3 and v.ci_low < 110 < v.ci_high
    assert not ref.failed([v])


def test_verdict_fail_has_a_negative_margin() -> None:
    m, df = cells_and_frame([90.0, 91.0, 89.0])
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.FAIL
    assert v.margin == pytest.approx(-0.10)
    assert ref.failed([v]) and ref.exit_status([v]) is Exit.FAILED
    assert ref.rows([v])[0]["margin"] == "-10.0%"


def test_a_cell_whose_repeats_failed_fails_and_one_never_measured_is_undecided() -> None:
    """'no data' used to be one outcome that failed: a cell that went out of memory does not deliver (fail),
    a cell never measured says nothing either way (undecided: exit 5, not 1, unless a policy says)."""
    m, df = cells_and_frame([math.nan, math.nan], status="oom")
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.FAIL and v.statuses == "2 oom" and math.isnan(v.margin)
    assert v.reason == "no ok repeat (2 oom)" and ref.exit_status([v]) is Exit.FAILED
    m2, empty = cells_and_frame([])
    (v2,) = ref.judge(m2.references, m2.cells(), empty)
    assert v2.verdict is Verdict.UNDECIDED and v2.statuses == "nothing stored"
    assert v2.reason == "nothing measured (nothing stored)"
    assert ref.exit_status([v2]) is Exit.UNDECIDED and not ref.failed([v2])
    assert ref.exit_status([v2], "fail") is Exit.FAILED and ref.failed([v2], "fail")
    assert ref.exit_status([v2], "pass") is Exit.OK
    assert ref.summary_line([v2]).startswith("References undecided: 1 undecided (1 check)")
    assert "counted as passed by --undecided pass" in ref.summary_line([v2], "pass")
    m3, cancelled = cells_and_frame([math.nan], status="not_started")
    (v3,) = ref.judge(m3.references, m3.cells(), cancelled)
    assert v3.verdict is Verdict.UNDECIDED and v3.reason == "nothing measured (1 not_started)"
    assert ref.exit_status([]) is Exit.UNDECIDED  # nothing covered: nothing was checked


def test_a_metric_not_measured_is_undecided() -> None:
    m = parse("references:\n  - {match: {model: mnist_cnn, precision: fp32}, memory: '<= 100'}\n")
    cell = m.cells()[0]
    (v,) = ref.judge(m.references, m.cells(), long_frame(rows_for(cell.key, [10.0, 11.0])))  # a CPU
    assert v.verdict is Verdict.UNDECIDED and v.reason == "peak_mem not measured in its ok repeats"


def test_an_entry_says_how_its_undecided_verdicts_count() -> None:
    m = parse("""
        references:
          - {match: {model: wrn, precision: fp32}, throughput: ">= 100", undecided: pass}
          - {match: {model: mnist_cnn, precision: fp32}, throughput: ">= 100"}
    """)
    assert [r.undecided for r in m.references] == ["pass", "error"]
    js = ref.judge(m.references, m.cells(), long_frame([]))
    assert [j.verdict for j in js] == [Verdict.UNDECIDED] * 2
    assert ref.exit_status(js[:1]) is Exit.OK and ref.exit_status(js) is Exit.UNDECIDED
    assert ref.exit_status(js, "fail") is Exit.FAILED  # --undecided overrides the entries
    err = error_of("references:\n  - {throughput: '>= 1', undecided: maybe}\n")
    assert "references[0].undecided (line 5): 'maybe' is not allowed; allowed: error, fail, pass" in err


@pytest.mark.parametrize(("bound", "measured", "outcome", "margin"), [
    ("2790 ± 5%", 2800, "pass", (139.5 - 10) / 2790),
    ("2790 ± 5%", 2600, "fail", (139.5 - 190) / 2790),
    ("<= 512", 256, "pass", 0.5),
    ("<= 512", 768, "fail", -0.5),
])
def test_tolerance_and_upper_bounds(bound: str, measured: float, outcome: str, margin: float) -> None:
    b = ref.parse_bound(bound)
    assert (b.low <= measured <= b.high) == (outcome == "pass")
    assert b.margin(measured) == pytest.approx(margin)


def test_memory_reference_is_in_mib() -> None:
    m = parse("references:\n  - {match: {model: mnist_cnn, precision: fp32}, memory: '<= 100'}\n")
    cell = m.cells()[0]
    df = long_frame(rows_for(cell.key, [10.0, 11.0], peak=120.0))
    (v,) = ref.judge(m.references, m.cells(), df)
    assert (v.metric, v.unit, v.verdict) == ("peak_mem", "MiB", Verdict.FAIL)
    assert v.measured == pytest.approx(120.0)


def test_verdict_json_is_stable_and_has_no_nan() -> None:
    m, df = cells_and_frame([110.0, 111.0, 109.0])
    doc = json.loads(ref.to_json(ref.judge(m.references, m.cells(), df)))
    assert doc["schema"] == 3 and doc["passed"] is True and doc["verdict"] == "pass" and doc["exit_status"] == 0
    assert doc["counts"] == {"pass": 1, "fail": 0, "undecided": 0}
    assert list(doc["verdicts"][0]) == ["reference", "cell_key", "cell", "metric", "unit", "expected", "verdict",
                                        "measured", "n", "ci_low", "ci_high", "margin", "statuses", "reason",
                                        "undecided_policy", "p_value", "p_adjusted", "needed", "confidence"]
    # One repeat is a value, not an interval: it rules nothing out, so it is undecided, never passed.
    m, df = cells_and_frame([110.0])
    one = json.loads(ref.to_json(ref.judge(m.references, m.cells(), df)))
    assert one["verdict"] == "undecided" and one["exit_status"] == 5 and one["verdicts"][0]["ci_low"] is None
    assert "a test needs 2+" in one["verdicts"][0]["reason"]
    undecided = json.loads(ref.to_json(ref.judge(m.references, m.cells(), long_frame([]))))
    assert undecided["verdict"] == "undecided" and undecided["passed"] is False and undecided["exit_status"] == 5


def test_match_values_take_the_axis_type() -> None:
    m = matrix.parse(textwrap.dedent("""
        environments: [{name: cpu, backend: local}]
        axes: {model: [wrn], channels_last: [true, false], lr: [1.0]}
        references:
          - {match: {channels_last: true, lr: 1}, throughput: '>= 1'}
    """), Path("m.yaml"))
    (r,) = m.references
    assert [c.params["channels_last"] for c in m.cells() if r.matches(c)] == [True]
    err = error_of("references:\n  - {match: {batch_size: many}, throughput: '>= 1'}\n")
    assert "references[0].match.batch_size (line 5)" in err


def test_the_table_shows_a_why_column_only_when_a_verdict_has_a_reason() -> None:
    from runner.report import decisions as present

    m, df = cells_and_frame([110.0, 112.0, 111.0, 111.5])
    plain = present.verdict_table(ref.judge(m.references, m.cells(), df))
    assert plain.columns[-1] == "repeats" and len(plain.aligns()) == len(plain.columns)
    m2, empty = cells_and_frame([])
    why = present.verdict_table(ref.judge(m2.references, m2.cells(), empty))
    assert why.columns[-1] == "why" and why.rows[0][-1].text == "nothing measured (nothing stored)"
    assert "References undecided" in present.terminal(why, ref.summary_line(ref.judge(m2.references, m2.cells(),
                                                                                      empty)))


def test_a_cell_with_a_failed_repeat_is_not_shown_to_pass() -> None:
    """2 ok and 1 oom inside the bound used to pass on the ok repeats alone, never mentioning the OOM."""
    m, df = cells_and_frame([110.0, 112.0, 108.0])
    df.loc[df.index[-1], "status"] = "oom"
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.UNDECIDED and v.reason.startswith("not every repeat ended ok (2 ok, 1 oom)")


def test_a_figure_in_another_unit_is_not_judged_against_the_reference() -> None:
    m, df = cells_and_frame([110.0, 112.0, 108.0])
    df["how_throughput"], df["unit_throughput"] = "mllog: mean of tracked_stats", "samples/s"
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.UNDECIDED and v.reason.startswith("not comparable: the throughput is obtained")


def wrn_with(ok: list[float], status: str, n: int) -> tuple[matrix.Matrix, object]:
    """The wrn fp32 cell with `ok` repeats and then `n` more (repeat numbers after them) that ended `status`."""
    m, _ = cells_and_frame([])
    wrn = next(c for c in m.cells() if c.params["model"] == "wrn" and c.params["precision"] == "fp32")
    bad = [{**r, "repeat": r["repeat"] + len(ok)}
           for r in rows_for(wrn.key, [math.nan] * n, status=status, model="wrn", start=2000.0)]
    return m, long_frame(rows_for(wrn.key, ok, model="wrn"), bad)


@pytest.mark.parametrize("failure", ["failed", "oom", "timeout", "diverged"])
def test_a_cell_whose_ok_repeats_alone_would_pass_is_not_shown_to_pass_beside_a_failed_one(failure: str) -> None:
    """3 ok repeats well inside the bound (their interval alone passes) and 3 that did not deliver: the ordering in
    _judgement let the interval's pass through before the failed repeats were looked at ("pass ... 3 ok, 3 oom")."""
    m, df = cells_and_frame([110.0, 112.0, 108.0])
    (alone,) = ref.judge(m.references, m.cells(), df)
    assert alone.verdict is Verdict.PASS  # the ok repeats by themselves pass
    m, both = wrn_with([110.0, 112.0, 108.0], failure, 3)
    (v,) = ref.judge(m.references, m.cells(), both)
    assert v.verdict is Verdict.UNDECIDED, v
    assert v.reason == (f"not every repeat ended ok (3 ok, 3 {failure}): the value is of the ok ones; more repeats "
                        "cannot show the cell passes") and v.n == 3
    assert v.needed is None  # more repeats cannot undo the ones that failed: until-decided adds none for it
    assert ref.exit_status([v]) is Exit.UNDECIDED and ref.summary_line([v]).startswith("References undecided")
    assert ref.rows([v])[0]["why"] == v.reason


def test_a_cell_whose_ok_repeats_miss_the_bound_still_fails_beside_a_failed_one() -> None:
    m, df = wrn_with([50.0, 51.0, 49.0], "oom", 1)
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.FAIL and v.margin == pytest.approx(-0.5)


def test_a_cell_whose_interval_reaches_across_the_bound_beside_a_failed_one_asks_for_no_more_repeats() -> None:
    """The mean inside, the interval across the bound: more repeats could narrow the interval, but never undo the
    timeout, so nothing would decide it and `until: decided` must not add repeats for it."""
    m, df = wrn_with([101.0, 106.0, 96.0], "timeout", 1)
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.UNDECIDED and v.needed is None
    assert v.reason.startswith("not every repeat ended ok (3 ok, 1 timeout)")


def test_check_and_run_decisions_do_not_pass_a_cell_with_oom_repeats(tmp_path: Path) -> None:
    """The reviewer's case through the command line on a real store: A 3 ok and 3 oom, B 3 ok, `>= 50`."""
    from typer.testing import CliRunner

    from runner import cli
    from runner.commands import decide
    from runner.store import Store
    from tests.analysis.helpers import store_of

    text = textwrap.dedent("""
        environments: [{name: A, backend: local}, {name: B, backend: local}]
        axes: {model: [mnist_cnn], precision: [fp32], batch_size: [32], device: [cpu]}
        run: {iterations: 20, warmup: 5, repeats: 3}
        references:
          - match: {model: mnist_cnn}
            throughput: ">= 50"
    """)
    (tmp_path / "m.yaml").write_text(text)
    m = matrix.parse(text, tmp_path / "m.yaml")
    a, b = m.cells()
    rows = (rows_for(a.key, [100.0, 101.0, 99.0], environment="A", device="cpu")
            + rows_for(a.key, [math.nan] * 3, status="oom", environment="A", start=2000.0, device="cpu")
            + rows_for(b.key, [100.0, 101.0, 99.0], environment="B", start=3000.0, device="cpu"))
    db = store_of(tmp_path / "r.db", [{**r, "repeat": i} for i, r in enumerate(rows[:6])] + rows[6:])
    out = CliRunner().invoke(cli.app, ["check", "-m", str(tmp_path / "m.yaml"), "--db", str(db), "--format", "json"])
    doc = json.loads(out.stdout)
    assert [(j["cell"].split()[0], j["verdict"]) for j in doc["verdicts"]] == [("A", "undecided"), ("B", "pass")]
    assert doc["verdicts"][0]["reason"].startswith("not every repeat ended ok (3 ok, 3 oom)")
    assert out.exit_code == 5 and doc["passed"] is False, out.stdout
    with Store(db, readonly=True) as store:
        said, status = decide.run_decisions(m, m.cells(), store)  # what `matrix run` prints after its summary
    assert status is Exit.UNDECIDED and "References undecided: 1 passed, 1 undecided" in said, said


def test_one_ok_repeat_beside_failed_ones_asks_until_decided_for_no_more_repeats() -> None:
    """1 ok inside the bound and 2 oom: undecided for good (more repeats cannot undo the oom), and `until: decided`
    added repeats for it because one ok repeat alone always asked for a second."""
    from runner.execution.decided_rounds import pending

    m, df = wrn_with([110.0], "oom", 2)
    (v,) = ref.judge(m.references, m.cells(), df)
    assert v.verdict is Verdict.UNDECIDED and v.final and v.n == 1
    waiting, total, decided = pending(m, m.cells(), df)
    assert (total, decided) == (1, 0) and waiting == []
    m, df = cells_and_frame([110.0])  # one ok repeat and nothing else: a second would decide it
    waiting, _, _ = pending(m, m.cells(), df)
    assert [w.keys for w in waiting] and not ref.judge(m.references, m.cells(), df)[0].final
