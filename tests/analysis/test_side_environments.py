"""A side that holds several environments (a run, a tag, a backend, a machine) never pairs one environment's cell
with another environment's cell of the same params when both sides hold those environments: the two sides pair on
the environment as well (runner/analysis/compare.py `pair_keys`). Two sides that are one environment each pair on the
params across the two environments, as `compare envA envB` always has.

The reviewer's case: run001 measured `slowenv` (50 img/s) then `fastenv` (200); run002 measured `fastenv` (205) then
`slowenv` (51). Each side's newest cell of the params was another environment, and `compare run001 run002` said
"3.87x slower" and the gate "slower by 286.5%" where each environment had changed by ~2%."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import runner.analysis as an
from runner.analysis import gate, gate_entries
from runner.base.errors import ConfigError
from runner.commands.decide import gate_command, gate_result
from runner.report import compare_command
from tests.analysis.helpers import long_frame, rows_for, store_of

RUN1, RUN2 = "20260101-000000-run001", "20260102-000000-run002"
CLOCK = iter(range(1, 10_000))


def cell(env: str, level: float, run_id: str = "r1", tags: tuple[str, ...] = (), key: str = "",
         **params: Any) -> list[dict[str, Any]]:
    """Three ok repeats of `env`'s cell (key `key`, else env@run) near `level`, measured after every earlier call."""
    start = 1000.0 + 10 * next(CLOCK)
    return [dict(r, tags=list(tags)) for r in rows_for(key or f"{env}@{run_id}", [level, level + 1, level - 1],
                                                        run_id=run_id, start=start, environment=env, **params)]


def swapped_runs() -> list[dict[str, Any]]:
    """The reviewer's store: each run measured both environments, in the other order."""
    return [*cell("slowenv", 50.0, RUN1), *cell("fastenv", 200.0, RUN1),
            *cell("fastenv", 205.0, RUN2), *cell("slowenv", 51.0, RUN2)]


def compared(rows: list[dict[str, Any]], a: str, b: str, pool: bool = False) -> an.Comparison:
    df = long_frame(rows)
    return an.compare(an.select_side(df, a, pool), an.select_side(df, b, pool))


def pairs_of(c: an.Comparison) -> dict[str, float]:
    """Each pair's environment (A's, which is B's) and its ratio B/A."""
    p = c.pairs
    assert (p["a_environments"] == p["b_environments"]).all(), p[["a_environments", "b_environments"]]
    return {str(e): round(float(r), 3) for e, r in zip(p["a_environments"], p["ratio"], strict=True)}


def unpaired_of(c: an.Comparison) -> set[tuple[str, str]]:
    return {(str(s), str(e)) for s, e in zip(c.unpaired["side"], c.unpaired["environments"], strict=True)}


def test_the_reviewers_runs_pair_each_environment_with_itself(tmp_path: Path) -> None:
    db = store_of(tmp_path / "t6.db", swapped_runs())
    out = json.loads(compare_command(db, RUN1, RUN2, "json"))
    assert out["paired_on"] == list(an.CELL_KEYS)
    got = {p["environment"]: (p["a_environments"], p["b_environments"], round(p["ratio"], 3)) for p in out["pairs"]}
    assert got == {"slowenv": ("slowenv", "slowenv", 1.02), "fastenv": ("fastenv", "fastenv", 1.025)}
    assert out["unpaired"] == []
    assert "slower" not in " ".join(p["change"] for p in out["pairs"])
    assert 1.0 < out["geomean_ratio"] < 1.03
    # The terminal and Markdown tables name the environment of each pair.
    md = compare_command(db, RUN1, RUN2, "md")
    assert "3.87x" not in md and "slowenv" in md and "fastenv" in md


def test_the_reviewers_gate_checks_each_environment_against_itself(tmp_path: Path) -> None:
    db = store_of(tmp_path / "t6.db", swapped_runs())
    text, _ = gate_command(db, RUN1, RUN2, ["slower:3%"], "json")
    doc = json.loads(text)
    assert "286" not in text
    assert not doc["tripped"] and all(c["verdict"] != "fail" for c in doc["checks"])
    assert {c["environment"]: (c["a_mean"], c["b_mean"]) for c in doc["checks"]} == \
        {"slowenv": (50.0, 51.0), "fastenv": (200.0, 205.0)}
    # And through the frame, as compare takes it: the checks' means are each environment's own.
    rules, checks, unchecked = gate_result(long_frame(swapped_runs()), RUN1, RUN2, ["slower:3%"])
    means = {c.params["environment"]: (round(c.a_mean), round(c.b_mean)) for c in checks}
    assert means == {"slowenv": (50, 51), "fastenv": (200, 205)} and unchecked == []


def test_tag_sides_that_share_one_environment_pair_only_it() -> None:
    """A = {e1, e2}, B = {e2, e3}: e2 with e2; e1 (A only) and e3 (B only) unpaired, never e1 with e3."""
    rows = [*cell("e1", 100.0, "r1", ("old",)), *cell("e2", 300.0, "r1", ("old",)),
            *cell("e2", 303.0, "r2", ("new",)), *cell("e3", 30.0, "r2", ("new",))]
    c = compared(rows, "tag:old", "tag:new")
    assert c.keys == an.CELL_KEYS
    assert pairs_of(c) == {"e2": 1.01}
    assert unpaired_of(c) == {("A", "e1"), ("B", "e3")}
    checks = gate.evaluate(c.a.frame, c.b.frame, gate.parse_rules(["slower:3%"]), keys=c.keys, same_definition=False)
    assert [(ch.params["environment"], round(ch.a_mean), round(ch.b_mean)) for ch in checks if ch.b_n] == \
        [("e2", 300, 303)]


def test_one_environment_against_a_side_of_two_pairs_the_shared_one() -> None:
    """run r1 measured e1; run r2 measured e1, then e2 (newer, same params): e1 with e1, e2 unpaired."""
    rows = [*cell("e1", 100.0, "r1"), *cell("e1", 101.0, "r2"), *cell("e2", 400.0, "r2")]
    for a, b in (("r1", "r2"), ("r2", "r1")):
        c = compared(rows, a, b)
        assert c.keys == an.CELL_KEYS
        assert set(pairs_of(c)) == {"e1"}
        assert unpaired_of(c) == {("B" if b == "r2" else "A", "e2")}


def test_two_single_environments_still_pair_across_them() -> None:
    """The usual `compare envA envB`: the params pair across the two environments."""
    rows = [*cell("envA", 100.0, "r1"), *cell("envB", 150.0, "r1")]
    c = compared(rows, "envA", "envB")
    assert c.keys == an.PARAM_KEYS
    assert c.pairs["ratio"].round(2).tolist() == [1.5]
    # Two runs of one environment each (the same one): paired on the params as before.
    rows = [*cell("e1", 100.0, "r1"), *cell("e1", 102.0, "r2")]
    assert compared(rows, "r1", "r2").keys == an.PARAM_KEYS


def test_sides_without_a_shared_environment_keep_the_params() -> None:
    """tag:x = {e1, e2} against tag:y = {e3}: nothing to pair by environment; the documented newest definition per
    params stands (and is listed)."""
    rows = [*cell("e1", 100.0, "r1", ("x",)), *cell("e2", 200.0, "r2", ("x",)), *cell("e3", 210.0, "r3", ("y",))]
    c = compared(rows, "tag:x", "tag:y")
    assert c.keys == an.PARAM_KEYS
    assert c.a.definitions.n_names == 1


def test_pool_pools_within_an_environment_never_across() -> None:
    """--pool on a run side of two environments pools each environment's definitions of a cell, not the two
    environments: e1 (redefined within r2) pooled with itself, e2 with e2."""
    rows = [*cell("e1", 100.0, "r1"), *cell("e2", 200.0, "r1"),
            *cell("e1", 100.0, "r2", key="e1-old"), *cell("e1", 104.0, "r2", key="e1-new"), *cell("e2", 202.0, "r2")]
    c = compared(rows, "r1", "r2", pool=True)
    assert c.keys == an.CELL_KEYS
    got = pairs_of(c)
    assert got == {"e1": 1.02, "e2": 1.01}
    assert c.pairs.loc[c.pairs["environment"] == "e1", "b_n"].tolist() == [6]


def test_a_redefined_environment_between_runs_is_still_compared() -> None:
    """Run against run is how an environment's change is measured: paired on the environment, its two definitions
    (another cell key in each run) are compared, as one environment's two runs always were; only two whole machines
    ask for the same definition."""
    rows = swapped_runs()
    c = compared(rows, RUN1, RUN2)
    assert c.pairs["verdict"].str.contains("not comparable").sum() == 0
    assert c.pairs["ratio"].notna().all()


def test_the_matrix_files_gate_pairs_as_compare_does() -> None:
    rows = [*cell("e1", 100.0, "r1", ("old",)), *cell("e2", 300.0, "r1", ("old",)),
            *cell("e2", 299.0, "r2", ("new",)), *cell("e1", 99.0, "r2", ("new",))]
    entry = gate_entries.GateEntry(0, "tag:old", "tag:new", tuple(gate.parse_rules(["slower:3%"])))
    checks = gate_entries.evaluate(entry, long_frame(rows))
    assert sorted((c.params["environment"], round(c.a_mean), round(c.b_mean)) for c in checks) == \
        [("e1", 100, 99), ("e2", 300, 299)]


def machines_frame() -> pd.DataFrame:
    """This store's run r2 of e1 and e2, and another machine's (store id `far`) of the same two: the same params."""
    far = [dict(r, origin="far") for r in [*cell("e1", 100.0, "r1@far", key="k1@far"),
                                           *cell("e2", 300.0, "r1@far", key="k2@far")]]
    df = long_frame([*far, *cell("e1", 101.0, "r2", key="k1"), *cell("e2", 303.0, "r2", key="k2")])
    if "origin" not in df:
        pytest.skip("the frame carries no origin")
    return df


def test_a_whole_machine_against_a_run_of_its_environments_pairs_by_environment() -> None:
    """`machine:far` holds e1 and e2 of the same cell; against this store's run of the same two it pairs each with
    itself (it was refused before: no environment to pair on)."""
    df = machines_frame()
    c = an.compare(an.select_side(df, "machine:far"), an.select_side(df, "r2"))
    assert c.keys == an.CELL_KEYS
    assert pairs_of(c) == {"e1": 1.01, "e2": 1.01}
    # Against one environment it shares nothing with, a machine of two environments of one cell is still refused.
    other = long_frame([dict(r, origin="far") for r in [*cell("e1", 100.0, "r1@far", key="k1@far"),
                                                        *cell("e2", 300.0, "r1@far", key="k2@far")]],
                       cell("e9", 101.0, "r2", key="k9"))
    with pytest.raises(ConfigError, match="several environments"):
        an.compare(an.select_side(other, "machine:far"), an.select_side(other, "r2"))


def test_a_side_of_several_environments_has_each_ones_precision_ratios() -> None:
    """fp16 over fp32 of e1 and of e2, each on its own: the two environments' cells of a precision never pooled."""
    rows = [*cell("e1", 100.0, "r1"), *cell("e1", 200.0, "r1", key="e1-16", precision="fp16"),
            *cell("e2", 300.0, "r1"), *cell("e2", 300.0, "r1", key="e2-16", precision="fp16"),
            *cell("e1", 101.0, "r2"), *cell("e2", 303.0, "r2")]
    c = compared(rows, "r1", "r2")
    got = c.precision_ratios[c.precision_ratios["side"] == "A"]
    assert dict(zip(got["environment"], got["ratio"].round(3), strict=True)) == {"e1": 2.0, "e2": 1.0}
    from runner.report import render
    view = render.compare_view(c)
    assert view.precision is not None and "r1 (e1) fp16/fp32" in view.precision.columns
    assert "r1 (e2) fp16/fp32" in view.precision.columns


def test_each_sentence_of_the_answer_names_its_environment_when_sides_pair_on_it() -> None:
    """Two runs of the same two environments: the answer's sentences are one per environment, and each says which
    (before, both read "for mnist_cnn at batch 32")."""
    from runner.report.render import compare_markdown

    md = compare_markdown(compared(swapped_runs(), RUN1, RUN2))
    said = [line for line in md.split("## The answer", 1)[1].split("Metric:", 1)[0].splitlines() if line.startswith("- ")]
    assert len(said) == 2 and {" in fastenv" in s for s in said} == {True, False}
    assert any(" in slowenv" in s for s in said)
