"""Paired comparisons (the round is the unit), Holm, McNemar, and the greedy-output check.

Task times are drawn from the recorded CPU runs (`simulated_run`: `benchmarks/decision_sim.py`'s
recorded per-task durations and their within-run and run-to-run noise at x1), not constants, so
an interval that collapses to a point would show.
"""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from benchmarks.decision_sim import Recorded, draw_run, level, load_recorded
from tuner.metrics import (
    DEFAULT_NOISE,
    BetweenRunNoise,
    RunOutcomes,
    bootstrap_tasks_per_hour,
    holm,
    judge_outputs,
    makespan,
    match_rates,
    paired_ratio,
    paired_success_drop,
    two_proportion_drop,
)
from tuner.metrics.noise import combine_noise, noise_for_study


def simulated_run(rec: Recorded, rng: random.Random, speed: float = 1.0) -> RunOutcomes:
    """A fresh start at the quiet machine's noise: realistic, noisy task times."""
    return draw_run(rec, level(1.0), rng, speed)


def _rounds(speed: float, n: int, seed: int) -> tuple[list[RunOutcomes], list[RunOutcomes]]:
    rec, rng = load_recorded(), random.Random(seed)
    cand = [simulated_run(rec, rng, speed) for _ in range(n)]
    base = [simulated_run(rec, rng, 1.0) for _ in range(n)]
    return cand, base


# Two-sided 95% quantiles of Student's t from a printed table (not from scipy), by df.
T_975 = {1: 12.706, 2: 4.303, 10: 2.228, 30: 2.042}


@pytest.mark.parametrize(("df", "table"), sorted(T_975.items()))
def test_one_round_interval_is_the_tables_t_quantile_times_the_sd(df: int, table: float) -> None:
    # One round leaves the noise as it is (no own spread to pool), so the interval's half-width
    # in log ratio is t(0.975, df) x the noise's sd: a wrong quantile or df shows here.
    noise = BetweenRunNoise(0.05, df, "table")
    base = RunOutcomes((("a", True, 10.0), ("b", True, 10.0)), 100.0)
    cand = RunOutcomes(base.outcomes, 100.0 / 1.02)
    est = paired_ratio([cand], [base], noise=noise)
    assert est is not None and est.df == df and est.ratio == pytest.approx(1.02)
    assert math.log(est.high / est.ratio) / 0.05 == pytest.approx(table, abs=1e-3)
    assert math.log(est.ratio / est.low) / 0.05 == pytest.approx(table, abs=1e-3)


def test_the_one_sided_p_is_the_t_tail_in_closed_form() -> None:
    # With 1 df, t is Cauchy: P(T > 1) = 1/4; with 2 df, P(T > t) = 1/2 - t / (2 sqrt(t^2 + 2)).
    base = RunOutcomes((("a", True, 10.0),), 100.0)
    for df, p in ((1, 0.25), (2, 0.5 - 1 / (2 * math.sqrt(3)))):
        cand = RunOutcomes(base.outcomes, 100.0 / math.exp(0.05))  # log ratio = one sd
        est = paired_ratio([cand], [base], noise=BetweenRunNoise(0.05, df, "closed form"))
        assert est is not None and est.p_value == pytest.approx(p, abs=1e-9)


def test_one_round_interval_is_the_between_run_term() -> None:
    # The H200 case of issue 21: one round at x1.036 with every task a little faster. The old
    # task bootstrap called it a win on an interval a few thousandths wide (benchmarks/
    # _legacy_rules.py at 95daa70); one run cannot show how much a whole run moves, so the
    # interval is the recorded run-to-run noise.
    rec = load_recorded()
    base = simulated_run(rec, random.Random(1), 1.0)
    cand = RunOutcomes(
        tuple((t, ok, s / 1.036) for t, ok, s in base.outcomes), base.wall_s / 1.036, 2
    )
    new = paired_ratio([cand], [base])
    assert new is not None and new.rounds == 1 and new.ratio == pytest.approx(1.036)
    half = stats.t.ppf(0.975, DEFAULT_NOISE.df) * DEFAULT_NOISE.log_sd
    assert math.log(new.high / new.ratio) == pytest.approx(half, rel=1e-6)
    assert not new.beats and new.low < 1.0 < new.high
    assert "between-run term" in new.describe()
    # A preset that measured a quieter machine gets a narrower interval, from its own noise.
    quiet = paired_ratio([cand], [base], noise=BetweenRunNoise(0.005, 4, "preset"))
    assert quiet is not None and quiet.beats and "0.005" in quiet.describe()


def test_rounds_that_agree_beat_and_rounds_that_disagree_do_not() -> None:
    cand, base = _rounds(1.10, 4, seed=3)
    agree = paired_ratio(cand, base)
    assert agree is not None and agree.rounds == 4 and agree.tasks == 12
    assert agree.beats and agree.low < agree.ratio < agree.high
    assert agree.p_value < 0.01
    # The same runs with one round's candidate 25% slower and another's 25% faster: the
    # rounds disagree, so the interval widens and reaches 1.
    scaled = [
        RunOutcomes(tuple((t, ok, s * f) for t, ok, s in r.outcomes), r.wall_s * f, 2)
        for r, f in zip(cand, (1.1 / 0.8, 1.1 / 1.25, 1.0, 1.0), strict=True)
    ]
    disagree = paired_ratio(scaled, base)
    assert disagree is not None
    assert disagree.low < 1.0 < disagree.high and not disagree.beats and not disagree.loses
    assert disagree.high / disagree.low > agree.high / agree.low
    # Their spread is far beyond the prior: the prior is updated by it (conjugate), by weight,
    # and the interval's sd lies between the prior's and the rounds' own.
    assert disagree.df == agree.df == DEFAULT_NOISE.df + 3
    assert "the prior 0.065 (2 df" in disagree.describe()
    assert "with this study's 4 rounds (3 df)" in disagree.describe()
    own = stats.tstd([math.log(r) for r in disagree.round_ratios])
    assert DEFAULT_NOISE.log_sd < disagree.noise.log_sd < own


def test_the_conjugate_update_matches_the_posterior_of_a_scaled_inverse_chi_square() -> None:
    # Prior scale s0^2 over d0 df, data sum of squares over k df: the posterior is scaled
    # inverse chi-square with d0 + k df; its scale is the one whose inverse-gamma mean times
    # (d0 + k - 2) / (d0 + k) it is. Checked against scipy's inverse gamma.
    prior = BetweenRunNoise(0.05, 6, "prior")
    post = combine_noise(prior, 0.03, 4, "own")
    a, b = post.df / 2, post.df * post.log_sd**2 / 2
    mean = stats.invgamma(a, scale=b).mean()
    assert mean == pytest.approx((6 * 0.05**2 + 0.03) / (6 + 4 - 2))
    assert post.df == 10 and combine_noise(prior, 1.0, 0, "none") is prior


def test_a_identical_config_rarely_beats() -> None:
    # 400 A/A pairs of two rounds from the recorded noise: at most about 2.5% one-sided.
    wins = sum(bool((p := paired_ratio(*_rounds(1.0, 2, s))) and p.beats) for s in range(400))
    assert wins <= 0.05 * 400


def test_only_common_tasks_are_paired() -> None:
    cand, base = _rounds(1.0, 1, seed=5)
    c = RunOutcomes((*cand[0].outcomes[:6], ("other", True, 10.0)), cand[0].wall_s, 2)
    paired = paired_ratio([c], base)
    assert paired is not None and paired.tasks == 6
    assert paired_ratio([], []) is None
    assert paired_ratio([RunOutcomes((("x", True, 1.0),), 1.0)], base) is None


def test_failed_tasks_lower_the_ratio() -> None:
    _, base = _rounds(1.0, 1, seed=6)
    outcomes = tuple((t, i % 2 == 0, s) for i, (t, _, s) in enumerate(base[0].outcomes))
    paired = paired_ratio([RunOutcomes(outcomes, base[0].wall_s, 2)], base)
    assert paired is not None
    assert paired.ratio == pytest.approx(0.5) and paired.loses


def test_makespan_runs_agents_at_once() -> None:
    assert makespan([4.0, 3.0, 2.0, 1.0], 1) == 10.0
    assert makespan([4.0, 3.0, 2.0, 1.0], 2) == 5.0  # 4+1 and 3+2
    assert makespan([10.0, 1.0, 1.0, 1.0], 2) == 10.0  # the long task is the window
    # A resample that draws the long task twice runs both at once on two agents: the window
    # does not double, so the interval's low end stays far above the serial scaling's.
    outcomes, seconds = [True] * 11, [100.0] + [1.0] * 10
    serial_low, _ = bootstrap_tasks_per_hour(outcomes, seconds, 100.0, agents=1)
    parallel_low, _ = bootstrap_tasks_per_hour(outcomes, seconds, 100.0, agents=2)
    assert parallel_low > 1.3 * serial_low


def test_a_noisier_machine_widens_the_noise_by_its_weight() -> None:
    # Two baseline starts 1% apart pull the prior down a little; 44% apart (the loaded 2-core
    # box of the A/A study) pull it up: each by its 1 df, never switching the prior off.
    assert noise_for_study(DEFAULT_NOISE, [530.0]) is DEFAULT_NOISE
    calm = noise_for_study(DEFAULT_NOISE, [530.0, 535.0])
    own = noise_for_study(DEFAULT_NOISE, [217.7, 313.1])
    assert calm.df == own.df == DEFAULT_NOISE.df + 1
    assert calm.log_sd < DEFAULT_NOISE.log_sd < own.log_sd < math.log(313.1 / 217.7)
    assert "with this study's 2 baseline starts (1 df)" in own.describe()


def test_holm_steps_down() -> None:
    assert holm({1: 0.01, 2: 0.02, 3: 0.03}, 0.05) == {1, 2, 3}
    assert holm({1: 0.01, 2: 0.04, 3: 0.03}, 0.05) == {1}
    assert holm({1: 0.02, 2: 0.02}, 0.025) == set()  # each alone would pass at 2.5%
    assert holm({}, 0.05) == set()


def test_mcnemar_uses_discordant_tasks_only() -> None:
    # 8 tasks only the baseline solved, 1 only the candidate: exact one-sided p.
    pairs = [(False, True)] * 8 + [(True, False)] + [(True, True)] * 30
    expected = stats.binomtest(8, 9, 0.5, alternative="greater").pvalue
    assert paired_success_drop(pairs) == pytest.approx(expected)
    assert paired_success_drop([(True, True), (False, False)]) is None
    # The same 4 tasks failing on both sides in two rounds is no evidence of a drop; pooled as
    # independent samples, a config that fails 4 more of 40 looked like one.
    same = [(False, False)] * 4 + [(True, True)] * 16
    assert paired_success_drop(same * 2) is None


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
