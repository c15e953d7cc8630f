"""Issue 44's goals in CI: verdicts that survive slow starts and drift the recordings lack.

`benchmarks/decision_sim.py` draws whole studies and judges them with the product's own stage
and export (`tuner.study.stages.confirm`, `tuner.results.export`, `tuner.metrics`); here with
its `Stress` noise on top of the fitted model (5% of starts at x0.75 and a random walk), and
once with nothing fitted (a per-study sd over 3-15%, AR(1), curved drift), on a fixed seed.
"""

from __future__ import annotations

import pytest

from benchmarks.decision_sim import (
    GOAL_FALSE_WIN,
    GOAL_POWER,
    INDEPENDENT,
    SLOW_WALK,
    STRESS_LEVEL,
    default_plan,
    run_cell,
    without_set_aside,
)


@pytest.mark.parametrize("x", [1.0, 3.0, STRESS_LEVEL, 6.0])
def test_false_wins_stay_within_the_goal_with_slow_starts_and_a_random_walk(x: float) -> None:
    row = run_cell(default_plan(), x, 400, seed=2, scenarios=("aa",), stress=SLOW_WALK)
    assert row["false_win"] <= GOAL_FALSE_WIN, row


def test_false_wins_stay_within_the_goal_on_noise_nothing_was_fitted_to() -> None:
    row = run_cell(default_plan(), 1.0, 400, seed=2, scenarios=("aa",), stress=INDEPENDENT)
    assert row["false_win"] <= GOAL_FALSE_WIN, row


@pytest.mark.extended  # 25 s: outside CI's 45 minutes (docs/ci.md)
def test_setting_slow_rounds_aside_costs_no_power() -> None:
    # The same studies (same seed), judged with and without the set-aside.
    now = run_cell(
        default_plan(), STRESS_LEVEL, 600, seed=2, scenarios=("power",), stress=SLOW_WALK
    )
    with without_set_aside():
        before = run_cell(
            default_plan(), STRESS_LEVEL, 600, seed=2, scenarios=("power",), stress=SLOW_WALK
        )
    # A small gain (+1.7 points here): the set-aside round still counts in the spread.
    assert now["power"] >= before["power"], (now, before)


@pytest.mark.extended
@pytest.mark.xfail(
    strict=True,
    reason="issue 44's power goal is not met by --confirm 2,10: the search's one run each "
    "puts a true +10% among the top 2 in only about 4 studies of 5 at x4.25 "
    "(docs/decision-sim.md)",
)
def test_a_true_gain_is_found_with_slow_starts_and_a_random_walk() -> None:
    row = run_cell(
        default_plan(), STRESS_LEVEL, 300, seed=2, scenarios=("power",), stress=SLOW_WALK
    )
    assert row["power"] >= GOAL_POWER, row
