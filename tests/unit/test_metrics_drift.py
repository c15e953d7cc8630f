"""Trend detection across rounds (`tuner.metrics.drift`) on recorded figures.

The figures are those of benchmarks/repeatability.py quoted in issue 27: the run recorded in the
repository (benchmarks/data/repeatability-smollm2-135m-cpu.json, its first record) and a run on
a fresh machine of the same kind.
"""

from __future__ import annotations

import pytest

from tuner.metrics.drift import detect_trend, first_round_gap

# The repository's record: baseline and n-gram tasks/h, paired ratio, rounds 1-3.
RECORDED_BASELINE = [539.19, 536.41, 553.99]
RECORDED_NGRAM = [722.71, 724.25, 744.12]
RECORDED_RATIOS = [1.3404, 1.3502, 1.3432]
# The fresh machine (issue 27): the baseline warmed about 25% over three fresh starts.
FRESH_BASELINE = [518.0, 597.0, 650.0]
FRESH_NGRAM = [1124.0, 1253.0, 1224.0]
FRESH_RATIOS = [2.171, 2.097, 1.884]


def test_the_fresh_machines_baseline_rise_is_a_trend() -> None:
    trend = detect_trend(FRESH_BASELINE)
    assert trend.found and trend.direction == "rise"
    assert trend.change == pytest.approx(66 * 2 / 597)  # Theil-Sen: median slope 66 per round
    assert "rises 22.1% over 3 rounds (monotone)" in trend.describe("baseline's tasks/h")


def test_the_fresh_machines_falling_paired_ratio_is_a_trend() -> None:
    trend = detect_trend(FRESH_RATIOS)
    assert trend.direction == "fall" and trend.change < -0.10


def test_a_rise_and_a_dip_is_not_a_trend() -> None:
    assert not detect_trend(FRESH_NGRAM).found  # 1124, 1253, 1224: not monotone
    assert not detect_trend(RECORDED_BASELINE).found
    assert not detect_trend(RECORDED_RATIOS).found


def test_a_monotone_run_within_noise_is_not_a_trend() -> None:
    trend = detect_trend(RECORDED_NGRAM)  # 723, 724, 744: monotone, but +2.9%
    assert trend.kendall_s == 3 and not trend.found
    assert "no trend" in trend.describe()
    assert detect_trend(RECORDED_NGRAM, min_change=0.02).found


def test_longer_series_use_mann_kendall() -> None:
    noisy_rise = [500, 540, 520, 580, 560, 610, 600, 650]
    trend = detect_trend(noisy_rise)
    assert trend.p_value is not None and trend.p_value < 0.05 and trend.direction == "rise"
    flat = [500, 520, 495, 515, 505, 510, 498, 512]
    assert not detect_trend(flat).found
    assert not detect_trend([500.0, 650.0]).found  # two rounds cannot show a trend


def test_first_round_against_the_later_rounds() -> None:
    assert first_round_gap(FRESH_BASELINE) == pytest.approx(518 / 623.5 - 1)
    assert first_round_gap([1.0]) is None
