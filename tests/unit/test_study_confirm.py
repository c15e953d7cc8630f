"""The confirmation stage's plan on stored trials: flagged configs are skipped, a failed
baseline round is queued again, a candidate's failed start is not (it counts against it)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner.attrs import Role, TrialAttr
from tuner.study.stages.confirm_finalists import plan_confirmation
from tuner.study.stages.confirm_rounds import BASELINE_ATTEMPTS, queue_rounds

optuna.logging.set_verbosity(optuna.logging.WARNING)

BASE = {"method": "none", "max_num_seqs": 8}
_DIST = {
    "method": CategoricalDistribution(["none", "ngram"]),
    "num_speculative_tokens": IntDistribution(1, 8),
    "max_num_seqs": IntDistribution(1, 16),
}


def _params(depth: int) -> dict[str, Any]:
    return (
        dict(BASE) if depth == 0 else {**BASE, "method": "ngram", "num_speculative_tokens": depth}
    )


def _add(
    study: optuna.Study,
    depth: int,
    value: float | None,
    role: Role,
    state: TrialState = TrialState.COMPLETE,
    **attrs: Any,
) -> None:
    params = _params(depth)
    study.add_trial(
        create_trial(
            state=state,
            value=value,
            params=params,
            distributions={k: _DIST[k] for k in params},
            user_attrs={TrialAttr.ROLE: str(role), **attrs},
        )
    )


def _searched() -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    _add(study, 0, 500.0, Role.BASELINE)  # #0
    _add(study, 3, 700.0, Role.CANDIDATE)  # #1: the best search score
    _add(study, 2, 650.0, Role.CANDIDATE)  # #2
    _add(study, 1, 600.0, Role.CANDIDATE)  # #3
    return study


def _queued(study: optuna.Study) -> list[tuple[int, int]]:
    return [
        (t.user_attrs[TrialAttr.CONFIRM_OF], t.user_attrs[TrialAttr.CONFIRM_ROUND])
        for t in study.get_trials(states=(TrialState.WAITING,))
    ]


def test_confirmation_skips_flagged_configs_and_takes_the_next() -> None:
    trials = _searched().get_trials()
    assert [t.number for t in plan_confirmation(trials, 2)] == [0, 1, 2]
    # #1 changed outputs against the floor: its slot goes to #3, the next by search score.
    assert [t.number for t in plan_confirmation(trials, 2, skip={1})] == [0, 2, 3]


def test_a_failed_baseline_round_is_queued_again_a_failed_candidate_start_is_not() -> None:
    study = _searched()
    failed = {TrialAttr.FAILURE_KIND: "startup_timeout", TrialAttr.FAILURE_REASON: "no /health"}
    confirm0 = {TrialAttr.CONFIRM_ROUND: 0}
    _add(
        study,
        0,
        None,
        Role.CONFIRM,
        TrialState.FAIL,
        **failed,
        **confirm0,
        **{TrialAttr.CONFIRM_OF: 0},
    )
    _add(
        study,
        3,
        None,
        Role.CONFIRM,
        TrialState.FAIL,
        **failed,
        **confirm0,
        **{TrialAttr.CONFIRM_OF: 1},
    )
    configs = [t for t in study.get_trials() if t.number in (0, 1)]
    assert queue_rounds(study, configs, 1) == 1
    assert _queued(study) == [(0, 0)]  # the baseline's round 0 again, not #1's failed start
    # A baseline that keeps failing is not retried for ever.
    rerun = study.ask()  # the queued baseline run, started: it fails again
    rerun.set_user_attr(TrialAttr.FAILURE_KIND, "startup_timeout")
    study.tell(rerun, state=TrialState.FAIL)
    for _ in range(BASELINE_ATTEMPTS - 2):
        _add(
            study,
            0,
            None,
            Role.CONFIRM,
            TrialState.FAIL,
            **failed,
            **confirm0,
            **{TrialAttr.CONFIRM_OF: 0},
        )
    assert queue_rounds(study, configs, 1) == 0
