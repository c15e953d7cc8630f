"""`benchmarks/window_noise.split`: the spread of a run's windows split into the start's part
and the part that moves within a start, on tables whose make-up is known by construction."""

from __future__ import annotations

import math
import random

from benchmarks.window_noise import analyse_pair, split, trend_per_hour


def test_start_offsets_alone_are_all_between_starts() -> None:
    offsets = [0.00, 0.05, -0.03, 0.10]
    windows = [0.0, -0.2, 0.01]  # a warm-up window and two others: the windows' own effect
    table = [[o + w for w in windows] for o in offsets]
    parts = split(table)
    assert parts["within_start_sd"] < 1e-12
    # The start effects are the offsets exactly: their sample sd.
    mean = sum(offsets) / 4
    sd = math.sqrt(sum((o - mean) ** 2 for o in offsets) / 3)
    assert abs(parts["between_start_sd"] - sd) < 1e-12
    assert parts["window_means_sd"] > 0.1 and parts["residual_df"] == 6


def test_window_noise_alone_leaves_about_nothing_between_starts() -> None:
    rng = random.Random(3)
    table = [[rng.gauss(0.0, 0.05) for _ in range(40)] for _ in range(30)]
    parts = split(table)
    assert abs(parts["within_start_sd"] - 0.05) < 0.005
    # Start means of 40 windows spread by 0.05 / sqrt(40); that share is taken out.
    assert parts["between_start_sd"] < 0.01


def test_the_trend_is_the_slope_per_hour() -> None:
    points = [(1000.0 + 360.0 * i, 0.02 * i) for i in range(5)]  # +2% every 6 minutes
    assert abs(trend_per_hour(points) - 0.2) < 1e-9


def test_kept_up_rounds_give_the_ratio_and_its_spread() -> None:
    # B is 1.4x A in every round but the last two, where it is 1.4 x e^(+-0.05): the ratio's
    # geometric mean stays 1.4 and the interval widens with that spread alone.
    logs = [0.0] * 6 + [0.05, -0.05]
    rounds = [
        {"A": 1000.0 * (1 + r / 10), "B": 1400.0 * (1 + r / 10) * math.exp(x)}
        for r, x in enumerate(logs)
    ]
    parts = analyse_pair(
        {"rounds": [{**r, "log_ratio": math.log(r["B"] / r["A"])} for r in rounds]}
    )
    assert abs(parts["ratio"] - 1.4) < 1e-9 and parts["rounds"] == 8
    expected_sd = math.sqrt(2 * 0.05**2 / 7)
    assert abs(parts["round_sd"] - expected_sd) < 1e-12
    assert parts["ratio_low"] < 1.4 < parts["ratio_high"] < 1.45
    # A's own windows moved 10% a round here; the ratio did not see it.
    assert parts["a_window_sd"] > 0.1
