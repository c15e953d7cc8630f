"""Confirmation rounds alternate their order, so a machine that drifts does not favour a config.

Every recorded session drifted (benchmarks/data/noise-model.json: about 0.5% a run, up on one
box, down on another). A drifting stand-in for a server start (`_drifting_run`: the same config
every time, each start `DRIFT` slower than the one before, as the large grid's baseline read
1,244 then 1,070 then 1,021 tasks/h) runs the queued confirmation trials in the order the
stage queued them, through a real optuna study (WAITING trials are started oldest first, as
the driver's workers take them). With the baseline first in every round, every round's copy
ran one start later and read slower: a verdict against a config that is the baseline itself.
"""

from __future__ import annotations

import math
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from tuner.attrs import Role, TrialAttr
from tuner.metrics import RunOutcomes, paired_ratio
from tuner.study.stages.confirm_finalists import plan_confirmation
from tuner.study.stages.confirm_rounds import queue_rounds

optuna.logging.set_verbosity(optuna.logging.WARNING)

BASE = {"method": "none", "max_num_seqs": 8}
COPY = {"method": "none", "max_num_seqs": 8}
_DIST = {
    "method": CategoricalDistribution(["none", "ngram"]),
    "max_num_seqs": IntDistribution(1, 16),
}
DRIFT = 0.02  # each start 2% slower than the one before
TASK_S = [11.3, 7.8, 13.8, 7.7, 7.7, 16.4, 17.6, 6.3, 4.9, 3.5, 8.7, 0.2]


def _drifting_run(index: int) -> RunOutcomes:
    """The index-th server start of the study: identical tasks, each slower by the drift."""
    seconds = [s * math.exp(DRIFT * index) for s in TASK_S]
    outcomes = tuple((f"t{i}", True, s) for i, s in enumerate(seconds))
    return RunOutcomes(outcomes, sum(seconds) / 2, 2)


def _study() -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for params, role, attrs in (
        (BASE, Role.BASELINE, {}),
        (COPY, Role.CANDIDATE, {TrialAttr.COPY_OF: 0}),  # --also-try baseline: an A/A study
    ):
        study.add_trial(
            create_trial(
                state=TrialState.COMPLETE,
                value=1000.0,
                params=params,
                distributions={k: _DIST[k] for k in params},
                user_attrs={TrialAttr.ROLE: str(role), **attrs},
            )
        )
    return study


def _run_waiting(study: optuna.Study, runs: dict[int, list[RunOutcomes]], start: int) -> int:
    """Start the queued trials oldest first, each on the next (drifted) server start."""
    index = start
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial = study.ask()
        of = int(trial.user_attrs[TrialAttr.CONFIRM_OF])
        run = _drifting_run(index)
        runs.setdefault(of, []).append(run)
        study.tell(trial, run.tasks_per_hour)
        index += 1
    return index


def _confirm(rounds: int) -> tuple[list[RunOutcomes], list[RunOutcomes], list[Any]]:
    study = _study()
    runs: dict[int, list[RunOutcomes]] = {}
    # As confirm_study: the floor start (the baseline's round 0) first, then the rounds.
    queue_rounds(study, [study.trials[0]], 1)
    index = _run_waiting(study, runs, 2)
    configs = plan_confirmation(study.get_trials(deepcopy=False), 1)
    assert [t.number for t in configs] == [0, 1]
    queue_rounds(study, configs, rounds)
    _run_waiting(study, runs, index)
    order = [
        t.user_attrs[TrialAttr.CONFIRM_OF]
        for t in study.trials
        if t.user_attrs.get(TrialAttr.ROLE) == str(Role.CONFIRM)
    ]
    return runs[1], runs[0], order


def test_rounds_alternate_their_order() -> None:
    _, _, order = _confirm(4)
    # Floor (baseline round 0), copy round 0; round 1 copy then baseline; round 2 baseline
    # first again; ...
    assert order == [0, 1, 1, 0, 0, 1, 1, 0]


def test_a_linear_drift_cancels_over_pairs_of_rounds() -> None:
    copy, base = _confirm(4)[:2]
    estimate = paired_ratio(copy, base)
    assert estimate is not None and estimate.rounds == 4
    # The copy is the baseline: with the order alternating, the drift cancels exactly.
    assert abs(math.log(estimate.ratio)) < 1e-9, estimate.round_ratios
    # Each round alone still sees it, in turn against either side.
    logs = [math.log(r) for r in estimate.round_ratios]
    assert logs[0] < -0.01 and logs[1] > 0.01


def test_with_an_odd_number_of_rounds_a_third_of_one_step_is_left() -> None:
    copy, base = _confirm(3)[:2]
    estimate = paired_ratio(copy, base)
    assert estimate is not None
    assert abs(math.log(estimate.ratio)) <= DRIFT / 3 + 1e-9
