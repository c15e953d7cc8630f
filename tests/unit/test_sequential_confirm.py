"""Sequential confirmation: the looks' levels spend the win test's 2.5% over the looks, and a
look stops on a win, on futility or at the cap, else asks for one more round."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from tuner.metrics import PairedEstimate
from tuner.results.export_rule import WIN_ALPHA, look_level, look_levels, next_look
from tuner.study.stages.confirm import ConfirmPlan, parse_confirm


def test_the_looks_spend_the_win_level_once_in_all() -> None:
    levels = look_levels(2, 10)
    assert len(levels) == 9  # after rounds 2, 3, ..., 10
    assert levels[0] < 1e-4 and levels == tuple(sorted(levels))  # O'Brien-Fleming: late
    assert 0.015 < levels[-1] < WIN_ALPHA
    # An independent walk (another seed): crossing any look's boundary under "no gain"
    # happens about WIN_ALPHA of the time, not the 9 x 1% that looking at 2.5% each time would.
    rng = np.random.default_rng(7)
    walk = np.cumsum(rng.standard_normal((200_000, 10)), axis=1)
    z = walk / np.sqrt(np.arange(1, 11))
    bounds = [NormalDist().inv_cdf(1 - p) if p > 0 else math.inf for p in levels]
    crossed = np.zeros(z.shape[0], dtype=bool)
    for r, c in zip(range(2, 11), bounds, strict=True):
        crossed |= z[:, r - 1] > c
    assert crossed.mean() == pytest.approx(WIN_ALPHA, abs=0.002)
    naive = (z[:, 1:] > 1.959963984540054).any(axis=1).mean()
    assert naive > 2.5 * WIN_ALPHA
    assert look_levels(3, 3) == (WIN_ALPHA,) and look_level(12, 2, 10) == levels[-1]


def _est(ratio: float, low: float, high: float, p: float) -> PairedEstimate:
    return PairedEstimate(ratio, low, high, rounds=4, tasks=12, p_value=p)


def test_a_look_stops_on_a_win_on_futility_or_at_the_cap() -> None:
    level = look_level(4, 2, 10)
    win = next_look({1: _est(1.3, 1.2, 1.4, level / 2), 2: None}, 4, 2, 10)
    assert win.stop and win.winner == 1 and "beats the baseline" in win.reason
    # p = 0.01 would pass a single test at 2.5%, not this early look.
    early = next_look({1: _est(1.1, 1.01, 1.2, 0.01)}, 4, 2, 10)
    assert not early.stop and "one more round" in early.reason
    futile = next_look({1: _est(0.97, 0.94, 1.01, 0.9), 2: _est(0.9, 0.8, 0.99, 0.99)}, 4, 2, 10)
    assert futile.stop and futile.winner is None and "2%" in futile.reason
    cap = next_look({1: _est(1.05, 0.95, 1.15, 0.1)}, 10, 2, 10)
    assert cap.stop and cap.winner is None and "cap of 10" in cap.reason
    assert math.isclose(cap.level, look_levels(2, 10)[-1])


def test_the_command_line_keeps_its_syntax_and_r_is_the_cap() -> None:
    plan = parse_confirm("1,3")
    assert plan == ConfirmPlan(1, 3) and plan.first_look == 2
    assert parse_confirm("2,1").first_look == 1  # one round: one look, at the full level
    assert not parse_confirm("0").enabled
    assert ConfirmPlan(2, 10).looks() == {"k": 2, "first": 2, "max": 10}
