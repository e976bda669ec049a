"""The adaptive-repeat stopping rule and its place in matrix.yaml."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from runner.analysis.adaptive import Stop, assess, relative_ci, replay
from runner.domain.cells import AdaptiveRepeats, RunSettings

RULE = AdaptiveRepeats(min=3, max=20, target_ci=0.01)


def test_repeats_as_a_mapping_keeps_repeats_the_minimum() -> None:
    run = RunSettings.model_validate({"repeats": {"min": 4, "max": 12, "target_ci": "2%"}})
    assert run.repeats == 4 and run.adaptive == AdaptiveRepeats(min=4, max=12, target_ci=0.02)
    assert RunSettings.model_validate({"repeats": 5}).adaptive is None


@pytest.mark.parametrize(("raw", "message"), [
    ({"repeats": {"min": 3, "max": 2}}, "repeats: max (2) is below min (3)"),
    ({"repeats": {"target_ci": 5}}, "repeats.target_ci: 5 is not a fraction below 1"),
    ({"repeats": {"mx": 5}}, "repeats.mx: unknown key 'mx'; allowed: min, max, target_ci"),
    ({"adaptive": {}}, "unknown key 'adaptive'"),
])
def test_bad_adaptive_settings_are_one_message(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        RunSettings.model_validate(raw)


def test_relative_ci_is_the_t_interval_over_the_mean() -> None:
    # n=4, std = sqrt(4/3), mean=100: t(0.975, 3) = 3.182 -> 3.182 * std / sqrt(4) / 100
    assert relative_ci([99.0, 101.0, 99.0, 101.0]) == pytest.approx(3.182 * (4 / 3) ** 0.5 / 2 / 100, rel=1e-3)
    assert math.isnan(relative_ci([100.0]))


def test_quiet_cell_stops_at_the_minimum() -> None:
    a = assess([100.0, 100.1, 99.9], RULE)
    assert a.stop is Stop.TARGET and a.more == 0 and a.n == 3


def test_noisy_cell_asks_for_more_at_most_doubling() -> None:
    a = assess([100.0, 103.0, 97.0], RULE)
    assert a.stop is Stop.MORE and a.more == 3
    assert "3 more" in a.words


def test_more_is_sized_from_the_spread_and_capped_by_max() -> None:
    values = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.0]  # ci ~0.6%: done
    assert assess(values, RULE).stop is Stop.TARGET
    slightly = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 101.5, 98.5]
    a = assess(slightly, RULE)
    assert a.stop is Stop.MORE and 1 <= a.more <= 8
    assert assess([100.0, 103.0, 97.0] * 6 + [100.0], RULE).more == 1  # 19 stored, max 20


def test_reaching_max_is_reported() -> None:
    a = assess([100.0, 110.0, 90.0] * 7, RULE)
    assert a.stop is Stop.MAX and a.n == 21 and "max reached" in a.words


def test_a_cell_with_a_failed_repeat_is_not_extended() -> None:
    assert assess([100.0, 90.0], RULE, stored=3, all_ok=False).stop is Stop.NOT_OK


def test_stored_repeats_count_and_below_min_runs_the_rest() -> None:
    a = assess([100.0], RULE, stored=1)
    assert a.stop is Stop.MORE and a.more == 2


def test_replay_walks_the_stored_repeats_in_order() -> None:
    values = [100.0, 103.0, 97.0, 100.0, 100.5, 99.5, 100.2, 99.8, 100.1, 99.9, 100.0, 100.0]
    a = replay(values, RULE)
    assert a.stop is Stop.TARGET and a.n in (6, 12)
    assert replay([100.0, 100.1, 99.9, 50.0], RULE).n == 3


def test_plans_and_messages_say_the_adaptive_range() -> None:
    run = RunSettings.model_validate({"repeats": {"min": 3, "max": 20, "target_ci": "1%"}})
    assert (run.repeats_text, run.most_repeats) == ("3-20 (adaptive to ±1%)", 20)
    assert (RunSettings().repeats_text, RunSettings().most_repeats) == ("3", 3)
