"""The confirmation's finalists come from pooled evidence: every run of the study, through an
additive model of the knobs (`tuner.metrics.pooled`), not one config's highest run.

The worlds here are drawn from a known additive truth with known noise, so a pick's regret
(how far its true tasks/h is below the best candidate's) is measured against that truth.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from typing import Any

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from tuner.attrs import Role, TrialAttr
from tuner.metrics.pooled import fit_pooled
from tuner.study.stages.confirm_finalists import finalists_line, plan_confirmation, rank_finalists

optuna.logging.set_verbosity(optuna.logging.WARNING)

SPACE: dict[str, list[Any]] = {"method": ["none", "a", "b", "c"], "kv": [1, 2, 3], "seqs": [4, 8]}
CONFIGS = [dict(zip(SPACE, values, strict=True)) for values in itertools.product(*SPACE.values())]
BASE = {"method": "none", "kv": 3, "seqs": 8}
PRIOR_START_SD = 0.024  # the CPU prior per start (0.034 per paired ratio), as a study is told


def _key(params: dict[str, Any]) -> str:
    return str(sorted(params.items()))


def _world(seed: int, noise: float, n: int = 15) -> tuple[dict[str, float], list[Any]]:
    """A true log tasks/h per config (additive knob effects plus a small interaction) and a
    study's runs: the baseline three times (search, a re-run, the floor) and n candidates once."""
    rng = random.Random(seed)
    effect = {(k, v): rng.gauss(0, 0.1) for k in SPACE for v in SPACE[k]}
    truth = {_key(c): sum(effect[(k, c[k])] for k in c) + rng.gauss(0, 0.03) for c in CONFIGS}
    chosen = [BASE, BASE, BASE, *rng.sample([c for c in CONFIGS if c != BASE], n)]
    runs = [(c, math.exp(7 + truth[_key(c)] + rng.gauss(0, noise))) for c in chosen]
    return truth, runs


def _regrets(seed: int, noise: float) -> tuple[float, float]:
    """(regret of the highest single run, regret of the pooled model's first finalist)."""
    truth, runs = _world(seed, noise)
    fit = fit_pooled(runs, baseline=BASE, noise_sd=PRIOR_START_SD)
    candidates = [c for c in fit.configs if c.params != BASE]
    best = max(truth[_key(c.params)] for c in candidates)
    raw = max(candidates, key=lambda c: c.raw_mean)
    pooled = fit.ranked()[0]
    return best - truth[_key(raw.params)], best - truth[_key(pooled.params)]


def test_at_the_noise_of_a_fresh_box_the_pooled_pick_is_nearer_the_best_than_the_top_run() -> None:
    # Per-start sd 0.12 (the large grid's repeats), while the study is told the prior 0.024:
    # the baseline's own starts show the fit the noise is larger.
    pairs = [_regrets(seed, 0.12) for seed in range(60)]
    raw = statistics.fmean(r for r, _ in pairs)
    pooled = statistics.fmean(p for _, p in pairs)
    assert pooled < 0.8 * raw, (raw, pooled)


def test_with_little_noise_it_ranks_as_the_runs_do() -> None:
    _, runs = _world(7, 0.002)
    fit = fit_pooled(runs, baseline=BASE, noise_sd=0.002)
    by_raw = sorted((c for c in fit.configs if c.params != BASE), key=lambda c: -c.raw_mean)
    by_mean = sorted((c for c in fit.configs if c.params != BASE), key=lambda c: -c.mean)
    assert [c.key for c in by_mean] == [c.key for c in by_raw]
    assert fit.ranked()[0].key == by_raw[0].key and fit.ranked()[0].p_best > 0.9


def test_probabilities_cover_the_candidates_only_and_sum_to_one() -> None:
    _, runs = _world(3, 0.12)
    fit = fit_pooled(runs, baseline=BASE, noise_sd=PRIOR_START_SD)
    base = [c for c in fit.configs if c.params == BASE]
    assert len(base) == 1 and base[0].runs == 3 and math.isnan(base[0].p_best)
    assert sum(c.p_best for c in fit.ranked()) == pytest.approx(1.0)
    assert fit.noise_sd >= PRIOR_START_SD
    # The same runs rank the same way every time (seeded draws).
    again = fit_pooled(runs, baseline=BASE, noise_sd=PRIOR_START_SD)
    assert [c.key for c in again.ranked()] == [c.key for c in fit.ranked()]


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="noise_sd"):
        fit_pooled([(BASE, 100.0)], baseline=BASE, noise_sd=0.0)
    with pytest.raises(ValueError, match="no run"):
        fit_pooled([(BASE, 0.0)], baseline=BASE, noise_sd=0.1)


# The confirmation stage on stored trials: one lucky run against consistent neighbours.
_DIST = {k: CategoricalDistribution(v) for k, v in SPACE.items()}


def _study(rows: list[tuple[dict[str, Any], float, Role]]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for params, value, role in rows:
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=value,
                params=params,
                distributions={k: _DIST[k] for k in params},
                user_attrs={TrialAttr.ROLE: str(role)},
            )
        )
    return study


def test_one_lucky_run_is_not_a_finalist_when_its_knobs_did_badly_everywhere_else() -> None:
    b, c = Role.BASELINE, Role.CANDIDATE
    study = _study(
        [
            (BASE, 1000.0, b),  # #0
            ({"method": "a", "kv": 1, "seqs": 8}, 1300.0, c),  # #1: the top run; kv 1 ...
            ({"method": "b", "kv": 1, "seqs": 8}, 850.0, c),  # ... read low everywhere else
            ({"method": "c", "kv": 1, "seqs": 4}, 830.0, c),
            ({"method": "none", "kv": 1, "seqs": 4}, 800.0, c),
            ({"method": "a", "kv": 3, "seqs": 4}, 1190.0, c),  # #5: method a with kv 3
            ({"method": "b", "kv": 3, "seqs": 8}, 1080.0, c),
            ({"method": "a", "kv": 3, "seqs": 8}, 1210.0, c),  # #7
            ({"method": "c", "kv": 2, "seqs": 8}, 950.0, c),
            (BASE, 1110.0, Role.BASELINE_RERUN),  # a re-run of the baseline during the search
            (BASE, 905.0, Role.CONFIRM),  # the floor start: starts of one server move ~10%
        ]
    )
    trials = study.get_trials()
    assert max(trials, key=lambda t: t.value or 0).number == 1
    finalists = [t.number for t in plan_confirmation(trials, 2, noise_sd=PRIOR_START_SD)]
    assert finalists[0] == 0 and 1 not in finalists and set(finalists[1:]) == {5, 7}
    ranked = rank_finalists(trials, noise_sd=PRIOR_START_SD)
    line = finalists_line(ranked, 2)
    assert line.startswith("confirmation: finalists by the pooled evidence of every run: #")
    assert "P(best)" in line and "#1 " not in line
    # A flagged config gives its slot to the next one.
    flagged = plan_confirmation(trials, 2, skip={ranked[0][0].number}, noise_sd=PRIOR_START_SD)
    assert ranked[0][0].number not in flagged and len(flagged) == 3
