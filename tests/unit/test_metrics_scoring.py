"""Scoring: tasks/hour with its bootstrap interval, Wilson interval, percentiles, energy."""

from __future__ import annotations

import pytest

from tuner.metrics import bootstrap_tasks_per_hour, percentile, score_tasks, wilson_interval
from tuner.records import StepRecord, TaskRecord


def _task(i: int, success: bool, wall: float, steps: tuple[StepRecord, ...] = ()) -> TaskRecord:
    return TaskRecord(
        index=i, task_id=f"t{i}", template="ledger", seed=i, warmup=False, success=success,
        failure_reason=None if success else "deadline", started_s=0.0, wall_s=wall, steps=steps,
    )  # fmt: skip


def test_percentile_interpolates_like_numpy() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 5.0
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


@pytest.mark.parametrize(
    ("successes", "trials", "low", "high"),
    [
        (8, 10, 0.4902, 0.9433),  # textbook values (Wilson 1927; Newcombe 1998, table I)
        (0, 10, 0.0, 0.2775),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),  # Newcombe 1998 example
    ],
)
def test_wilson_interval_known_values(successes: int, trials: int, low: float, high: float) -> None:
    got_low, got_high = wilson_interval(successes, trials)
    assert got_low == pytest.approx(low, abs=1e-4)
    assert got_high == pytest.approx(high, abs=1e-4)


def test_wilson_interval_without_trials() -> None:
    assert wilson_interval(0, 0) == (0.0, 0.0)


def test_bootstrap_degenerates_to_the_point_when_tasks_are_identical() -> None:
    low, high = bootstrap_tasks_per_hour([True] * 10, [30.0] * 10, 120.0)
    assert low == pytest.approx(300.0)  # 10 * 3600 / 120
    assert high == pytest.approx(300.0)


def test_bootstrap_brackets_the_estimate_is_seeded_and_narrows_with_more_tasks() -> None:
    outcomes = [True, False, True, True, False, True, True, True] * 3
    durations = [10.0, 40.0, 12.0, 9.0, 35.0, 11.0, 14.0, 10.0] * 3
    wall = 100.0
    point = sum(outcomes) * 3600 / wall
    low, high = bootstrap_tasks_per_hour(outcomes, durations, wall, seed=1)
    assert low < point < high
    assert (low, high) == bootstrap_tasks_per_hour(outcomes, durations, wall, seed=1)
    assert (low, high) != bootstrap_tasks_per_hour(outcomes, durations, wall, seed=2)
    wide = bootstrap_tasks_per_hour(outcomes[:8], durations[:8], wall / 3, seed=1)
    assert wide[1] - wide[0] > high - low
    assert bootstrap_tasks_per_hour([], [], 10.0) == (0.0, 0.0)


def test_score_tasks_rates_latencies_and_energy() -> None:
    steps = (
        StepRecord(0, 1000, None, 11, ttft_s=0.1, latency_s=1.1, reuse_class="first"),
        StepRecord(1, 1200, 896, 21, ttft_s=0.3, latency_s=2.3, reuse_class="all"),
    )
    tasks = [_task(0, True, 3.4, steps), _task(1, False, 5.0, steps[:1]), _task(2, True, 3.0)]
    score = score_tasks(tasks, 10.0, itl_s=[0.1, 0.2, 0.3], energy_joules=500.0)
    assert score.tasks == 3 and score.successes == 2
    assert score.tasks_per_hour == pytest.approx(720.0)
    assert score.success_rate == pytest.approx(2 / 3)
    assert (score.success_rate_low, score.success_rate_high) == wilson_interval(2, 3)
    assert score.ttft_p50 == pytest.approx(0.1)  # ttfts 0.1, 0.1, 0.3
    assert score.tpot_p50 == pytest.approx(0.1)  # (1.1 - 0.1) / 10 twice, (2.3 - 0.3) / 20
    assert score.itl_p50 == pytest.approx(0.2)
    assert score.output_tokens_per_s == pytest.approx((11 + 21 + 11) / 10.0)
    assert score.joules_per_task == pytest.approx(250.0)
    assert score.joules_per_token == pytest.approx(500.0 / 43)


def test_unmeasured_energy_stays_none_not_zero() -> None:
    score = score_tasks([_task(0, True, 1.0)], 2.0)
    assert score.energy_joules is None
    assert score.joules_per_task is None and score.joules_per_token is None
    assert score.ttft_p50 is None and score.itl_p99 is None
