"""The bisect's search on recorded data: one step, two steps, no change, noise only, a change of status, and what
cannot be decided (never a culprit). Recorded repeats come from reports/eras-cpu/repeats.csv (five real PyTorch
releases on one CPU); longer lists resample them with a fixed seed."""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

from runner.analysis import bisect_pair
from runner.analysis import bisect_search as search
from runner.analysis.bisect_search import (
    FOUND,
    NO_CHANGE,
    SPREAD,
    UNDECIDED,
    Sample,
    Settings,
    bisect,
    replay,
)
from runner.analysis.verdict import Verdict
from runner.base.exitcodes import Exit

ROOT = Path(__file__).resolve().parents[2]
ERAS = ["torch-1.0-2018", "torch-1.7-2020", "torch-1.13-2022", "torch-2.6-2025", "torch-2.13-2026"]


def recorded(model: str, precision: str) -> dict[str, list[tuple[str, float]]]:
    out: dict[str, list[tuple[str, float]]] = {e: [] for e in ERAS}
    with (ROOT / "reports/eras-cpu/repeats.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["model"] == model and row["precision"] == precision:
                out[row["environment"]].append((row["status"], float(row["throughput"] or "nan")))
    return out


WRN = {e: [v for _, v in reps] for e, reps in recorded("wrn", "fp32").items()}
QUIET_CV = 0.02  # the quiet CPU of docs/statistics.md: 1-2% per repeat


class Counting:
    """A replay that counts what it hands out (what a store would have had to measure)."""

    def __init__(self, data: list[list[float] | str | Sample]) -> None:
        self.inner = replay(data)
        self.asked: dict[int, int] = {}

    def __call__(self, wanted: Mapping[int, int]) -> dict[int, Sample]:
        for i, n in wanted.items():
            self.asked[i] = max(self.asked.get(i, 0), n)
        return self.inner(wanted)


def levels_of(level: float, n: int, rng: np.random.Generator, cv: float = QUIET_CV) -> list[float]:
    return list(level * (1 + cv * rng.standard_normal(n)))


def test_levels_grow_to_the_most_repeats() -> None:
    assert bisect_pair.levels(3, 10) == (3, 5, 8, 10)
    assert bisect_pair.levels(3, 20) == (3, 5, 8, 13, 20)
    assert bisect_pair.levels(2, 2) == (2,)
    assert bisect_pair.levels(1, 4) == (2, 4)   # a test needs two repeats a side
    assert bisect_pair.levels(5, 3) == (5,)
    assert Settings(levels=(3, 5, 8, 10)).alpha_look == pytest.approx(0.0125)


def test_a_single_step_is_found_measuring_few_of_sixteen_environments() -> None:
    rng = np.random.default_rng(1)
    data = [levels_of(100.0 if i <= 10 else 80.0, 10, rng) for i in range(16)]
    measure = Counting(data)
    answer = bisect(16, measure, Settings(threshold=0.05))
    assert answer.outcome == FOUND and answer.exit_code == Exit.OK, answer.why
    assert answer.culprit is not None and (answer.culprit.a, answer.culprit.b) == (10, 11)
    assert answer.culprit.change == pytest.approx(-0.2, abs=0.03) and answer.culprit.p_value < 0.0125
    low, high = answer.culprit.ci
    assert low < answer.culprit.change < high < 0
    assert answer.share == pytest.approx(1.0, abs=0.15)
    assert len(measure.asked) <= 7 < 16  # 2 ends + about log2(16) middles (+ none for the residual checks)
    assert set(answer.repeats) == set(measure.asked)


def test_the_recorded_eras_are_a_spread_change_not_one_culprit() -> None:
    """WRN fp32 on five releases (reports/eras-cpu): 2018 -> 2020 is 2.5x, 2020 -> 2022 another 1.4x. Binary search
    would stop at one pair; the search says the change is spread and names both steps."""
    three = bisect(5, replay([WRN[e] for e in ERAS]), Settings(threshold=0.10))
    # Three repeats each, and no more to measure: 2018 -> 2020 is a step (p = 0.0054 on the log scale, below
    # 0.05 / 4 looks), but the rest of the range cannot be shown the same, so it is a candidate, never a culprit.
    assert three.outcome == UNDECIDED and three.unresolved, three.why
    assert three.culprit is not None and (three.culprit.a, three.culprit.b) == (0, 1)
    assert "candidate, not a culprit" in three.why
    rng = np.random.default_rng(0)
    data = [list(rng.choice(WRN[e], 10) * (1 + 0.05 * rng.standard_normal(10))) for e in ERAS]
    answer = bisect(5, replay(data), Settings(threshold=0.10))
    assert answer.outcome == SPREAD and answer.exit_code == Exit.SPREAD, answer.why
    assert answer.culprit is None
    steps = {(s.a, s.b) for s in answer.steps}
    assert (0, 1) in steps and len(steps) >= 2
    assert all(s.verdict is Verdict.FAIL for s in answer.steps)


def test_two_steps_are_spread_with_both_named() -> None:
    rng = np.random.default_rng(2)
    data = [levels_of(100.0 * (1.3 if i > 2 else 1.0) * (1.3 if i > 5 else 1.0), 10, rng) for i in range(8)]
    answer = bisect(8, replay(data), Settings(threshold=0.10))
    assert answer.outcome == SPREAD and answer.culprit is None, answer.why
    assert {(s.a, s.b) for s in answer.steps} == {(2, 3), (5, 6)}


def test_a_drift_of_small_steps_is_spread_not_a_culprit() -> None:
    """+4% at every step of eight: 32% end to end, no single step beyond a 10% threshold."""
    data = [[100.0 * 1.04 ** i] * 3 for i in range(8)]  # no spread at all: every comparison is exact
    answer = bisect(8, replay(data), Settings(threshold=0.10))
    assert answer.outcome == SPREAD and answer.culprit is None
    assert answer.drifts and not answer.steps


def test_no_change_is_said_and_exits_1() -> None:
    data = [[250.0, 250.0, 250.0]] * 6  # the same values everywhere: certain, nothing to look for
    measure = Counting(data)
    answer = bisect(6, measure, Settings(threshold=0.05))
    assert answer.outcome == NO_CHANGE and answer.exit_code == Exit.FAILED
    assert set(measure.asked) == {0, 5}  # only the ends
    rng = np.random.default_rng(3)
    quiet = [levels_of(100.0, 10, rng) for _ in range(8)]
    assert bisect(8, replay(quiet), Settings(threshold=0.10)).outcome == NO_CHANGE


@pytest.mark.parametrize("seed", range(40))
def test_noise_only_never_names_a_culprit(seed: int) -> None:
    """Every environment the same release's recorded WRN repeats (2018's, CV about 20%), resampled: whatever the
    noise does, no culprit and no spread change is reported (undecided or no change)."""
    rng = np.random.default_rng(seed)
    pool = np.array(WRN["torch-1.7-2020"])
    data = [list(rng.choice(pool, 10) * (1 + 0.05 * rng.standard_normal(10))) for _ in range(8)]
    answer = bisect(8, replay(data), Settings(threshold=0.10))
    assert answer.outcome in (NO_CHANGE, UNDECIDED), (answer.outcome, answer.why)
    assert answer.culprit is None or answer.outcome == UNDECIDED


def test_status_changes_count_supported_from_one_release() -> None:
    """bf16 on the CPU (reports/eras-cpu): unsupported in 2018 and 2020, ok from 2022."""
    bf16 = recorded("mnist_cnn", "bf16")
    data: list[list[float] | str | Sample] = []
    for e in ERAS:
        statuses = tuple(s for s, _ in bf16[e])
        data.append(Sample(statuses * 4, tuple(v for s, v in bf16[e] if s == "ok") * 4))
    for metric in (search.STATUS, "throughput"):
        answer = bisect(5, replay(data), Settings(threshold=0.5, metric=metric))
        if metric == search.STATUS:
            assert answer.outcome == FOUND, answer.why
        assert answer.culprit is None or (answer.culprit.a, answer.culprit.b) == (1, 2)
        assert any((s.a, s.b) == (1, 2) and s.kind == search.STATUS and s.why == "unsupported -> ok"
                   for s in answer.steps)


def test_ok_then_oom_is_a_step_with_a_throughput_metric() -> None:
    rng = np.random.default_rng(4)
    data: list[list[float] | str | Sample] = [levels_of(100.0, 10, rng) for _ in range(4)]
    data += ["oom"] * 4
    answer = bisect(8, replay(data), Settings(threshold=0.05))
    assert answer.outcome == FOUND and answer.culprit is not None
    assert (answer.culprit.a, answer.culprit.b, answer.culprit.why) == (3, 4, "ok -> oom")


def test_an_environment_that_cannot_start_is_undecided_never_a_culprit() -> None:
    rng = np.random.default_rng(5)
    data: list[list[float] | str | Sample] = [levels_of(100.0 if i < 4 else 150.0, 10, rng) for i in range(8)]
    data[4] = Sample(missing="torch-x: image matrix/x:1 not found")  # the first environment after the step
    answer = bisect(8, replay(data), Settings(threshold=0.05))
    assert answer.outcome == UNDECIDED and answer.exit_code == Exit.UNDECIDED, answer.why
    assert answer.culprit is None or answer.outcome == UNDECIDED
    assert any("image matrix/x:1 not found" in u.why for u in answer.unresolved + [answer.end])
    assert not any(4 in (s.a, s.b) and s.verdict is Verdict.FAIL for s in answer.steps)


def test_a_pair_too_noisy_to_decide_is_undecided() -> None:
    """A 15% step under 40% noise: at ten repeats neither significant nor within the threshold."""
    rng = np.random.default_rng(6)
    data = [levels_of(100.0 if i < 2 else 115.0, 10, rng, cv=0.4) for i in range(4)]
    answer = bisect(4, replay(data), Settings(threshold=0.10))
    assert answer.outcome == UNDECIDED and answer.culprit is None
    assert answer.end.verdict is Verdict.UNDECIDED and "at the most repeats" in answer.end.why
    assert answer.repeats == {0: 10, 3: 10}


def test_the_same_data_gives_the_same_answer_and_asks_for_nothing_more() -> None:
    """A comparison looks at each environment's first `level` repeats: data stored beyond them (by a later step or
    another run) cannot change an earlier decision, so a second bisect over a store takes the same path."""
    rng = np.random.default_rng(7)
    data = [levels_of(100.0 if i <= 5 else 70.0, 10, rng, cv=0.05) for i in range(12)]
    first = Counting(data)
    a1 = bisect(12, first, Settings(threshold=0.10))
    more = [d + levels_of(200.0, 30, rng) for d in data]  # what other runs added later: never looked at
    second = Counting(more)
    a2 = bisect(12, second, Settings(threshold=0.10))
    assert a1.outcome == a2.outcome == FOUND
    assert [(c.a, c.b, c.verdict, c.n_a, c.n_b) for c in a1.decisions] == \
           [(c.a, c.b, c.verdict, c.n_a, c.n_b) for c in a2.decisions]
    assert first.asked == second.asked


def test_compare_is_exact_without_spread_and_refuses_too_few() -> None:
    s = Settings(threshold=0.05)
    same = search.compare(0, 1, Sample(("ok",) * 3, (10.0,) * 3), Sample(("ok",) * 3, (10.2,) * 3), s)
    assert same.verdict is Verdict.PASS and same.ci == (pytest.approx(0.02), pytest.approx(0.02))
    far = search.compare(0, 1, Sample(("ok",) * 3, (10.0,) * 3), Sample(("ok",) * 3, (12.0,) * 3), s)
    assert far.verdict is Verdict.FAIL and far.p_value == 0.0
    one = search.compare(0, 1, Sample(("ok",), (10.0,)), Sample(("ok",) * 3, (12.0, 12.1, 11.9)), s)
    assert one.verdict is Verdict.UNDECIDED and "1 ok repeat on A" in one.why and one.more
    # -4.8% is within a 5% threshold in log scale (1/1.05 - 1), -5% beyond it
    assert bisect_pair._beyond(-0.05, 0.05) and not bisect_pair._beyond(-0.047, 0.05)
    flaky = Sample(("ok", "oom", "ok"), (10.0, 10.1))
    assert flaky.state == "ok" and flaky.flaky
    assert Sample(("oom", "failed", "oom")).state == "oom"


def test_a_step_whose_other_side_stays_undecided_is_a_candidate_not_a_culprit() -> None:
    """The WRN fp32 repeats of reports/bisect-eras-cpu (img/s, as measured while the load rose from 1 to 6): 2018 ->
    2020 changed, but 2020 -> 2026 (-40%) could be neither shown the same nor changed at ten repeats. The
    environments after a culprit must be shown to match the last end; undecided is not that."""
    data = [[71.8, 72.2, 46.1, 74.1, 63.0],
            [34.1, 32.2, 34.4, 34.5, 25.2, 32.0, 32.3, 9.1, 9.6, 6.4],
            [32.4, 35.4, 39.5],
            [],  # 2025: never measured
            [14.3, 29.0, 14.3, 21.9, 29.6, 18.2, 7.6, 6.1, 4.6, 5.0]]
    answer = bisect(5, replay(data), Settings(threshold=0.10))
    assert answer.outcome == UNDECIDED and answer.exit_code == Exit.UNDECIDED, answer.why
    assert answer.culprit is not None and (answer.culprit.a, answer.culprit.b) == (0, 1)
    assert [(u.a, u.b) for u in answer.unresolved] == [(1, 4)]
    assert "candidate" in answer.why


def test_a_flaky_onset_is_not_one_step() -> None:
    """Crashes in 0/3, 0/3, 1/3, 1/3, 2/3 repeats: "ok when at least half are ok" used to name e3 -> e4 as the
    culprit explaining 100%, though crashes began at e1 -> e2. Rates are compared as rates (Fisher's exact test):
    more repeats where a side is flaky, else undecided; never a culprit from a rising failure rate."""
    f, o = "failed", "ok"

    def env(statuses: list[str]) -> Sample:
        return Sample(tuple(statuses), (1.0,) * statuses.count(o))
    data: list[list[float] | str | Sample] = [
        env([o] * 10), env([o] * 10), env([o, f, o, o, o, f, o, o, o, o]), env([o, o, f, o, f, o, o, o, o, o]),
        env([f, o, f, f, o, f, f, o, f, f])]
    for levels in ((3,), (3, 5, 8, 10)):
        answer = bisect(5, replay(data), Settings(metric=search.STATUS, levels=levels))
        assert answer.outcome == UNDECIDED and answer.exit_code == Exit.UNDECIDED, answer.why
        assert not any(s.verdict is Verdict.FAIL and (s.a, s.b) == (3, 4) for s in answer.steps)
    three = bisect(5, replay(data), Settings(metric=search.STATUS, levels=(3,)))
    assert "fisher p=0.4" in three.why and "at the most repeats" in three.why
    many = [env([o] * 20), env([o] * 20), env([f] * 14 + [o] * 6), env([f] * 14 + [o] * 6), env([f] * 20)]
    found = bisect(5, replay(many), Settings(metric=search.STATUS, levels=(3, 10, 20)))
    assert found.culprit is None or (found.culprit.a, found.culprit.b) == (1, 2), found.why


def test_a_loss_is_compared_at_a_step_both_recorded() -> None:
    """With `iterations: auto` the slower environment trains fewer steps: bisect used to name fast -> slow +28%
    while compare aligned the steps and said the same. Now both take the loss at the last step every repeat
    recorded; without such a step the pair is not comparable, never a culprit."""
    def env(steps: int, final: float, seed: int) -> Sample:
        rng = np.random.default_rng(seed)
        ladders = tuple({1: 2.3, 10: 1.9, 20: 1.5 + 0.01 * rng.standard_normal(), steps: final} for _ in range(5))
        return Sample(("ok",) * 5, (final,) * 5, steps=(steps,) * 5, ladders=ladders)
    data: list[list[float] | str | Sample] = [env(73, 0.389, 1), env(40, 0.5, 2)]
    answer = bisect(2, replay(data), Settings(metric="loss_end", threshold=0.10, levels=(5,)))
    assert answer.outcome == NO_CHANGE, answer.why
    assert "at step 20" in answer.end.why
    bare = [Sample(("ok",) * 5, (0.389,) * 5, steps=(73,) * 5), Sample(("ok",) * 5, (0.5,) * 5, steps=(40,) * 5)]
    answer = bisect(2, replay(bare), Settings(metric="loss_end", threshold=0.10, levels=(5,)))
    assert answer.outcome == UNDECIDED and answer.culprit is None
    assert "comes after different numbers of training steps (40, 73)" in answer.end.why


def test_the_interval_of_a_change_is_never_below_minus_100_percent() -> None:
    """Two repeats a side, one wildly off: the interval of the difference over A's mean gave -25816.4%..+33803.5%,
    a fall of more than everything. The interval of the ratio is made on the log scale: above -100%, and it holds
    the change itself."""
    from runner.analysis import significance
    from runner.report.bisect_answer import change_text

    a, b = Sample(statuses=("ok", "ok"), values=(100.0, 101.0)), Sample(statuses=("ok", "ok"), values=(100.0, 3000.0))
    settings = Settings()
    c = bisect_pair.compare(0, 1, a, b, settings)
    assert c.ci is not None and c.change is not None
    assert -1 <= c.ci[0] < c.change < c.ci[1]
    assert c.verdict is Verdict.UNDECIDED and "interval -100.0%.." in c.why and "e+" in c.why  # '+7.46e+21%'
    from runner.analysis import METRICS
    text = change_text(c, METRICS["throughput"], settings.confidence * 100)
    low_text = text.split("% CI ")[1].split("..")[0]
    assert float(low_text.rstrip("%")) >= -100.0, text
    # the same function on a pair with little spread: about the difference's interval, never below 0
    low, high = significance.ratio_interval([100.0, 101.0, 99.0], [110.0, 111.0, 109.0])
    dlow, dhigh = significance.welch_interval([100.0, 101.0, 99.0], [110.0, 111.0, 109.0])
    assert low == pytest.approx(1 + dlow / 100, abs=0.005) and high == pytest.approx(1 + dhigh / 100, abs=0.005)
    assert significance.ratio_interval([5.0, 5.0], [6.0, 6.0]) == (1.2, 1.2)
