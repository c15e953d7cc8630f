"""Sequential confirmation: the looks' levels spend the win test's 2.5% over the looks, and a
look stops on a win, on futility or at the cap, else asks for one more round."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from tuner.metrics import BetweenRunNoise, PairedEstimate
from tuner.results.export_rule import WIN_ALPHA, look_level, look_levels, next_look
from tuner.study.stages.confirm_plan import ConfirmPlan, parse_confirm


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


def _sd_est(ratio: float, sd: float, rounds: int, df: int) -> PairedEstimate:
    noise = BetweenRunNoise(sd, df, "test")
    return PairedEstimate(ratio, 0.0, math.inf, rounds=rounds, tasks=12, df=df, noise=noise)


def test_the_upper_bound_is_the_t_quantile_of_the_estimates_own_spread() -> None:
    # Worked by hand: x1.00 over 4 rounds, sd 0.06 of a round over 5 df: se 0.03, and the
    # one-sided 95% quantile of t with 5 df is 2.015048 (tables), so exp(0.0604514) = 1.06232.
    assert _sd_est(1.0, 0.06, 4, 5).upper(0.05) == pytest.approx(1.062316, abs=1e-5)
    assert _sd_est(1.0, 0.06, 4, 5).upper(0.025) == pytest.approx(math.exp(2.570582 * 0.03))
    # Nothing to bound it with: no futility from an estimate without degrees of freedom.
    assert _sd_est(1.0, 0.06, 4, 0).upper(0.05) == math.inf


def test_a_copy_stops_for_futility_only_when_even_its_optimistic_end_is_under_5_percent() -> None:
    # x1.00 with se 0.03 (upper 1.062): a 5% gain is still possible, so one more round.
    assert not next_look({1: _sd_est(1.0, 0.06, 4, 5)}, 4, 2, 10).stop
    # The same estimate with se 0.02 over more df (upper 1.035): nothing left to win.
    assert next_look({1: _sd_est(1.0, 0.04, 4, 8)}, 4, 2, 10).stop
    # One config still live keeps the stage going, whatever the others read.
    live = next_look({1: _sd_est(0.9, 0.04, 4, 8), 2: _sd_est(1.03, 0.06, 4, 5)}, 4, 2, 10)
    assert not live.stop


def test_a_look_stops_on_a_win_on_futility_or_at_the_cap() -> None:
    level = look_level(4, 2, 10)
    win = next_look({1: _est(1.3, 1.2, 1.4, level / 2), 2: None}, 4, 2, 10)
    assert win.stop and win.winner == 1 and "beats the baseline" in win.reason
    # p = 0.01 would pass a single test at 2.5%, not this early look.
    early = next_look({1: _est(1.1, 1.01, 1.2, 0.01)}, 4, 2, 10)
    assert not early.stop and "one more round" in early.reason
    assert early.reason.startswith(f"undecided at level {level:.2g}")
    # The first look of 2,10 has no level to spend (O'Brien-Fleming): it says when one can win.
    first = next_look({1: _est(1.5, 1.3, 1.7, 1e-6)}, 2, 2, 10)
    assert not first.stop and first.reason == (
        "undecided (a win can be declared from round 3 on): one more round"
    )
    futile = next_look({1: _sd_est(1.0, 0.02, 4, 5), 2: _sd_est(0.9, 0.05, 4, 5)}, 4, 2, 10)
    assert futile.stop and futile.winner is None and "5%" in futile.reason
    cap = next_look({1: _est(1.05, 0.95, 1.15, 0.1)}, 10, 2, 10)
    assert cap.stop and cap.winner is None and "cap of 10" in cap.reason
    assert math.isclose(cap.level, look_levels(2, 10)[-1])


def test_the_command_line_keeps_its_syntax_and_r_is_the_cap() -> None:
    plan = parse_confirm("1,3")
    assert plan == ConfirmPlan(1, 3) and plan.first_look == 2
    assert parse_confirm("2,1").first_look == 1  # one round: one look, at the full level
    assert not parse_confirm("0").enabled
    assert ConfirmPlan(2, 10).looks() == {"k": 2, "first": 2, "max": 10}


def test_a_stage_under_way_keeps_its_plan_whichever_driver_joins() -> None:
    import optuna

    from tuner.attrs import StudyAttr
    from tuner.study.stages.confirm_plan import stage_plan

    study = optuna.create_study()
    mine = ConfirmPlan(1, 3)
    # Nothing begun: the driver's own plan.
    assert stage_plan(study, mine) == (mine, None)
    # Begun by another driver with 2,10 and not stopped: that plan, and a line saying so.
    study.set_user_attr(StudyAttr.CONFIRM_PLAN, ConfirmPlan(2, 10).looks())
    plan, note = stage_plan(study, mine)
    assert plan == ConfirmPlan(2, 10)
    assert note is not None and "under way with --confirm 2,10" in note
    assert "not --confirm 1,3" in note and "tuner confirm --confirm 1,3" in note
    # The same plan: nothing to say. --confirm 0 stays off (it runs the floor start only).
    assert stage_plan(study, ConfirmPlan(2, 10)) == (ConfirmPlan(2, 10), None)
    assert stage_plan(study, ConfirmPlan(0, 0)) == (ConfirmPlan(0, 0), None)
    # Stopped: a later command may extend it with its own plan.
    study.set_user_attr(StudyAttr.CONFIRM_STOP, {"rounds": 4, "reason": "no config can gain"})
    assert stage_plan(study, mine) == (mine, None)
