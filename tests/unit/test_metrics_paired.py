"""Paired comparisons, the two-proportion test and the greedy-output check."""

from __future__ import annotations

import random

import pytest

from tuner.metrics import (
    RunOutcomes,
    bootstrap_tasks_per_hour,
    judge_outputs,
    match_rates,
    paired_ratio,
    two_proportion_drop,
)


def _run(seconds: list[float], wins: list[bool] | None = None, agents: int = 2) -> RunOutcomes:
    wins = wins or [True] * len(seconds)
    outcomes = tuple((f"t{i}", ok, s) for i, (ok, s) in enumerate(zip(wins, seconds, strict=True)))
    return RunOutcomes(outcomes, sum(seconds) / agents)


def test_pairing_cancels_the_task_mix_that_unpaired_intervals_carry() -> None:
    # Task lengths vary 10x across the set; the candidate is 10% faster on every task.
    rng = random.Random(3)
    base_s = [rng.uniform(5, 50) for _ in range(24)]
    base, cand = _run(base_s), _run([s / 1.1 for s in base_s])
    paired = paired_ratio([cand], [base])
    assert paired is not None
    assert paired.ratio == pytest.approx(1.1)
    assert paired.beats and paired.high - paired.low < 0.01
    # Unpaired, each run's own interval is wide enough to overlap the other's.
    _, b_high = bootstrap_tasks_per_hour([True] * 24, base_s, base.wall_s)
    c_low, _ = bootstrap_tasks_per_hour([True] * 24, [s / 1.1 for s in base_s], cand.wall_s)
    assert c_low < b_high


def test_rounds_carry_run_to_run_noise() -> None:
    # Same per-task speed on average, but the rounds disagree: the interval must include 1.
    base_s = [10.0] * 12
    rounds_c = [_run([s * f for s in base_s]) for f in (0.8, 1.25, 1.0)]
    rounds_b = [_run(base_s) for _ in range(3)]
    paired = paired_ratio(rounds_c, rounds_b, seed=1)
    assert paired is not None and paired.rounds == 3
    assert paired.low < 1.0 < paired.high
    assert not paired.beats and not paired.loses


def test_only_common_tasks_are_paired() -> None:
    base = _run([10.0] * 4)
    cand = RunOutcomes((*base.outcomes[:2], ("other", True, 10.0)), 15.0)
    paired = paired_ratio([cand], [base])
    assert paired is not None and paired.tasks == 2
    assert paired_ratio([], []) is None
    assert paired_ratio([RunOutcomes((("x", True, 1.0),), 1.0)], [base]) is None


def test_failed_tasks_lower_the_ratio() -> None:
    base = _run([10.0] * 10)
    cand = _run([10.0] * 10, wins=[True] * 5 + [False] * 5)
    paired = paired_ratio([cand], [base])
    assert paired is not None
    assert paired.ratio == pytest.approx(0.5) and paired.loses


def test_two_proportion_drop() -> None:
    # 10 of 20 against 18 of 20: pooled 0.7, z = -0.4 / sqrt(0.21 x 0.1) = -2.76, p = 0.0029.
    p = two_proportion_drop(10, 20, 18, 20)
    assert p == pytest.approx(0.0029, abs=1e-4)
    assert two_proportion_drop(18, 20, 18, 20) == pytest.approx(0.5)
    assert two_proportion_drop(20, 20, 20, 20) is None
    assert two_proportion_drop(0, 0, 5, 10) is None


def test_match_rates_count_the_common_prefix() -> None:
    assert match_rates([[1, 2, 3, 4]], [[1, 2, 9, 4]]) == [0.5]
    assert match_rates([[1, 2]], [[1, 2, 3, 4]]) == [0.5]
    assert match_rates([[]], [[]]) == [1.0]


def test_judge_outputs_against_the_floor() -> None:
    base = [[i, i + 1, i + 2, i + 3] for i in range(16)]
    second = [list(b) for b in base]
    second[0][3] = -1  # two baseline starts differ a little: floor 0.98
    changed = [[b[0], -1, -1, -1] for b in base]  # diverges after the first token
    check = judge_outputs(base, changed, second)
    assert check.floor == pytest.approx(1 - 0.25 / 16)
    assert check.match == pytest.approx(0.25)
    assert check.changes_outputs
    assert "changes outputs" in check.describe()
    same = judge_outputs(base, second, second)
    assert not same.changes_outputs
    # Several restarts of the baseline: each prompt's floor is their mean match.
    third = [list(b) for b in base]
    third[1][2] = -1
    two = judge_outputs(base, changed, second, third)
    assert two.floor == pytest.approx(1 - (0.25 + 0.5) / 2 / 16)
    assert two.changes_outputs
    # Without a second baseline start there is no floor, and nothing is flagged.
    assert not judge_outputs(base, changed).changes_outputs
