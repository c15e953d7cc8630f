"""The first-divergence judgement of greedy probe answers (`tuner.metrics.correctness`)."""

from __future__ import annotations

import pytest

from tuner.metrics.correctness import (
    DEFAULT_TIE_MARGIN,
    MAX_TIE_MARGIN,
    ProbeAnswers,
    calibrate_tie_margin,
    first_divergences,
    judge_outputs,
)

PROMPTS = 16
LENGTH = 8


def _answers(
    flips: dict[int, tuple[int, int]] | None = None,
    margins: dict[tuple[int, int], float] | None = None,
    runner_up: int = 999,
) -> ProbeAnswers:
    """16 answers of 8 tokens (prompt p: 100p, 100p+1, ...), each position's own token at
    -0.1 and `runner_up` behind it by `margins[(p, k)]` (default 5 nats).

    `flips[p] = (k, token)`: answer p has `token` at position k and its own way after it.
    """
    flips = flips or {}
    margins = margins or {}
    outputs, top = [], []
    for p in range(PROMPTS):
        ids = [100 * p + k for k in range(LENGTH)]
        if p in flips:
            k, token = flips[p]
            ids = ids[:k] + [token] + [-j for j in range(1, LENGTH - k)]
        outputs.append(ids)
        top.append(
            tuple(
                ((tok, -0.1), (runner_up, -0.1 - margins.get((p, k), 5.0)), (-99, -9.0))
                for k, tok in enumerate(ids)
            )
        )
    return ProbeAnswers(outputs, tuple(top))


def test_the_recorded_near_tie_is_rounding() -> None:
    # issue 27: a first divergence where the baseline's top two were at -1.48 and -1.61.
    top = [[(t, -0.1), (9, -4.0)] for t in (1, 2, 3, 4, 5, 6)]
    top[4] = [(5, -1.48), (77, -1.61)]
    base = ProbeAnswers([[1, 2, 3, 4, 5, 6]], (tuple(tuple(p) for p in top),))
    cand = ProbeAnswers([[1, 2, 3, 4, 77, 8]])
    (d,) = first_divergences(base, cand)
    assert (d.position, d.baseline_token, d.candidate_token) == (4, 5, 77)
    assert d.margin == pytest.approx(0.13) and not d.margin_is_bound
    check = judge_outputs(base, cand)
    assert not check.changes_outputs
    assert [x.kind for x in check.divergences] == ["near_tie"]


def test_near_ties_flipped_in_a_few_prompts_are_not_flagged() -> None:
    base = _answers(margins={(0, 5): 0.1, (3, 6): 0.2, (7, 4): 0.3})
    cand = _answers(flips={0: (5, 999), 3: (6, 999), 7: (4, 999)})
    check = judge_outputs(base, cand)
    assert [d.prompt for d in check.divergences] == [0, 3, 7]
    assert all(d.kind == "near_tie" for d in check.divergences)
    assert not check.changes_outputs
    assert check.tie_margin == DEFAULT_TIE_MARGIN
    assert "3/16 prompts diverge, at near-ties (margin <= 0.30" in check.describe()


def test_clear_margins_in_two_prompts_are_breakage_but_one_is_not() -> None:
    base = _answers()
    one = judge_outputs(base, _answers(flips={2: (6, 999)}))
    assert [d.kind for d in one.divergences] == ["clear"] and not one.changes_outputs
    two = judge_outputs(base, _answers(flips={2: (6, 999), 9: (5, 999)}))
    assert two.changes_outputs
    assert "2/16 prompts diverge at a clear margin (the smallest 5.00 nats)" in two.describe()


def test_a_token_outside_the_baseline_top_k_is_at_least_its_last_margin() -> None:
    base = _answers()
    cand = _answers(flips={p: (6, 12345) for p in range(4)})
    check = judge_outputs(base, cand)
    assert all(d.margin_is_bound and d.margin == pytest.approx(8.9) for d in check.divergences)
    assert check.changes_outputs


def test_early_divergence_in_half_the_prompts_is_breakage_even_at_near_ties() -> None:
    margins = {(p, 1): 0.05 for p in range(PROMPTS)}
    base = _answers(margins=margins)
    check = judge_outputs(base, _answers(flips={p: (1, 999) for p in range(8)}))
    assert all(d.kind == "near_tie" for d in check.divergences)
    assert check.changes_outputs
    assert "8/16 prompts diverge within their first 4 tokens" in (check.reason or "")
    fewer = judge_outputs(base, _answers(flips={p: (1, 999) for p in range(7)}))
    assert not fewer.changes_outputs


def test_baseline_restarts_calibrate_the_threshold() -> None:
    base = _answers(margins={(1, 3): 0.4, (5, 6): 0.9, (6, 6): 0.9})
    restart = _answers(flips={1: (3, 999)})  # two baseline starts diverge at margin 0.4
    threshold, calibrated = calibrate_tie_margin(base, [restart], DEFAULT_TIE_MARGIN)
    assert calibrated and threshold == pytest.approx(0.8)
    cand = _answers(flips={5: (6, 999), 6: (6, 999)})  # margin 0.9: beyond 0.8 still
    assert judge_outputs(base, cand, restart).changes_outputs
    base_wide = _answers(margins={(1, 3): 0.5, (5, 6): 0.9, (6, 6): 0.9})
    check = judge_outputs(base_wide, cand, restart)
    assert check.calibrated and check.tie_margin == pytest.approx(1.0)
    assert not check.changes_outputs
    # Calibration is capped: a clear change stays detectable.
    huge = _answers(margins={(1, 3): 4.0})
    assert calibrate_tie_margin(huge, [restart], DEFAULT_TIE_MARGIN) == (MAX_TIE_MARGIN, True)


def test_the_threshold_stored_with_the_baseline_is_the_default() -> None:
    base = _answers(margins={(p, 6): 0.7 for p in range(PROMPTS)})
    strict = ProbeAnswers(base, base.top, tie_margin=0.5)
    loose = ProbeAnswers(base, base.top, tie_margin=1.0)
    cand = _answers(flips={p: (6, 999) for p in range(4)})
    assert judge_outputs(strict, cand).changes_outputs
    assert not judge_outputs(loose, cand).changes_outputs


def test_without_logprobs_the_floor_rule_decides() -> None:
    base = [[i, i + 1, i + 2, i + 3] for i in range(16)]
    changed = [[b[0], -1, -1, -1] for b in base]
    second = [list(b) for b in base]
    check = judge_outputs(base, changed, second)
    assert check.changes_outputs and not check.judged_by_logprobs
    assert "vs floor" in check.describe()
    assert not judge_outputs(base, changed).changes_outputs


def test_identical_answers() -> None:
    base = _answers()
    check = judge_outputs(base, _answers())
    assert check.divergences == () and not check.changes_outputs
    assert "all 16 prompts answered identically" in check.describe()
