"""One slow start does not sink a verdict: a round far outside the others' spread is set aside.

The rounds here are written down by hand (a candidate truly about 10% faster, a 2-core box's
round-to-round spread of a few percent), and one of them holds a start at x0.75.
"""

from __future__ import annotations

import math

import pytest

from tuner.metrics import DEFAULT_NOISE, PairedEstimate, RunOutcomes, paired_ratio
from tuner.metrics.paired import outlier_rounds

TASKS = tuple((f"t{i}", True, 10.0) for i in range(12))


def _run(tasks_per_hour: float) -> RunOutcomes:
    return RunOutcomes(TASKS, 12 * 3600.0 / tasks_per_hour)


# Paired ratios of eight rounds of a candidate about 10% faster, spread a few percent.
RATIOS = (1.12, 1.07, 1.13, 1.09, 1.06, 1.11, 1.14, 1.08)


def _estimate(ratios: tuple[float, ...]) -> PairedEstimate | None:
    return paired_ratio([_run(500 * r) for r in ratios], [_run(500)] * len(ratios))


def test_a_slow_candidate_start_is_set_aside_and_the_win_stands() -> None:
    slowed = (*RATIOS[:3], RATIOS[3] * 0.75, *RATIOS[4:])
    est = _estimate(slowed)
    assert est is not None
    assert est.set_aside == (3,)
    assert est.rounds == 8 and est.used == 7
    # The estimate is that of the other seven rounds, and it still beats the baseline.
    assert est.ratio == pytest.approx(
        math.exp(sum(math.log(r) for i, r in enumerate(slowed) if i != 3) / 7)
    )
    assert est.beats
    assert "round 4 (x0.818) set aside" in est.describe()


def test_a_slow_baseline_start_is_set_aside_too() -> None:
    # The baseline's start at x0.75 makes its round read x1/0.75 too fast.
    est = _estimate((*RATIOS[:5], RATIOS[5] / 0.75, *RATIOS[6:]))
    assert est is not None and est.set_aside == (5,)


def test_rounds_within_the_spread_are_all_kept() -> None:
    est = _estimate(RATIOS)
    assert est is not None and est.set_aside == () and est.used == 8


def test_too_few_rounds_to_tell_keep_every_round() -> None:
    # Three rounds, one of them slow: which one is the odd one cannot be told apart from noise.
    est = _estimate((1.10, 1.12, 0.80))
    assert est is not None and est.set_aside == () and est.used == 3


def test_at_most_one_round_in_five_is_set_aside() -> None:
    logs = [0.1, 0.11, 0.09, 0.1, 0.6, -0.5, 0.1, 0.12, 0.08, 0.1]
    assert len(outlier_rounds(logs, DEFAULT_NOISE)) == 2
    assert len(outlier_rounds(logs[:9], DEFAULT_NOISE)) == 1


def test_a_set_aside_round_still_widens_the_interval_as_an_edge_round() -> None:
    slowed = (*RATIOS[:3], RATIOS[3] * 0.75, *RATIOS[4:])
    est, kept = _estimate(slowed), _estimate(RATIOS[:3] + RATIOS[4:])
    assert est is not None and kept is not None
    assert est.ratio == pytest.approx(kept.ratio)
    # Wider than the seven rounds alone: the slow round's spread counts, capped.
    assert est.low < kept.low and est.high > kept.high
    assert est.upper(0.05) > kept.upper(0.05)
