"""The confirmation stage's rounds: which (config, round) runs are missing, in which order a round
runs them (alternating, so a linear drift cancels), and queueing them under the study's confirm
lock so two drivers never queue the same run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, is_infeasible
from tuner.study.stages.confirm_finalists import _baseline, _role

T = TypeVar("T")


__all__ = [
    "BASELINE_ATTEMPTS",
    "missing_runs",
    "queue_rounds",
    "queue_rounds_locked",
    "round_order",
]


# Starts of the baseline a round gets before it is left unpaired: a missing baseline round is
# re-run, but a baseline that cannot start is not retried for ever.
BASELINE_ATTEMPTS: Final = 3


def _already(trials: list[FrozenTrial]) -> set[tuple[int, int]]:
    """(config, round) pairs done, running or queued; interrupted runs are re-queued by resume.

    A candidate's failed run is done (it counts against the config). The baseline's is not,
    until the round has failed `BASELINE_ATTEMPTS` times: its round is re-run.
    """
    keep = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.PRUNED)
    base = _baseline(trials)
    done = set()
    base_failures: dict[int, int] = {}
    for t in trials:
        if _role(t) != Role.CONFIRM:
            continue
        key = (int(t.user_attrs[TrialAttr.CONFIRM_OF]), int(t.user_attrs[TrialAttr.CONFIRM_ROUND]))
        infeasible = t.state == TrialState.COMPLETE and is_infeasible(t)
        failed_for_good = (
            t.state == TrialState.FAIL
            and t.user_attrs.get(TrialAttr.FAILURE_KIND) not in (None, "interrupted")
        ) or infeasible
        if base is not None and key[0] == base.number and failed_for_good:
            base_failures[key[1]] = base_failures.get(key[1], 0) + 1
            if base_failures[key[1]] >= BASELINE_ATTEMPTS:
                done.add(key)
            continue
        if t.state in keep or failed_for_good:
            done.add(key)
    return done


def _enqueue(study: optuna.Study, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    from tuner.study.search.roles import enqueue_run

    enqueue_run(study, params, role=Role.CONFIRM, attrs=attrs)


def round_order(configs: Sequence[T], round_: int) -> list[T]:
    """The order of one round's runs: as given in even rounds, reversed in odd ones (A B, B A,
    A B, ...).

    A machine that drifts (every recorded session did, up or down, by about 0.5% a run:
    benchmarks/data/noise-model.json) would otherwise favour whichever config runs second in
    every round; alternating cancels a linear drift over each pair of rounds.
    """
    return list(configs) if round_ % 2 == 0 else list(reversed(configs))


def missing_runs(
    study: optuna.Study, configs: list[FrozenTrial], rounds: int, *, first: int = 0
) -> list[tuple[FrozenTrial, int]]:
    """The (config, round) runs of rounds `first`..`rounds - 1` not done, running or queued,
    in the order `queue_rounds` queues them."""
    done = _already(study.get_trials(deepcopy=False))
    return [
        (t, round_)
        for round_ in range(first, rounds)
        for t in round_order(configs, round_)
        if (t.number, round_) not in done
    ]


def queue_rounds(
    study: optuna.Study, configs: list[FrozenTrial], rounds: int, *, first: int = 0
) -> int:
    """Queue the missing runs of rounds `first`..`rounds - 1`, round by round in
    `round_order` (A B C, C B A, ...); returns how many were queued."""
    missing = missing_runs(study, configs, rounds, first=first)
    for t, round_ in missing:
        attrs = {TrialAttr.CONFIRM_OF: t.number, TrialAttr.CONFIRM_ROUND: round_}
        _enqueue(study, dict(t.params), attrs)
    return len(missing)


def queue_rounds_locked(
    url: str, study: optuna.Study, configs: list[FrozenTrial], rounds: int
) -> int:
    """`queue_rounds` under the study's confirm lock (`tuner.storage.locks.study_lock`): two
    drivers that reach the same round at once read and queue one after the other, so the
    second finds the first's runs and queues none."""
    from tuner.storage.locks import study_lock

    with study_lock(url, study.study_name, "confirm"):
        return queue_rounds(study, configs, rounds)


def _rounds_begun(study: optuna.Study, configs: list[FrozenTrial]) -> int:
    """1 + the highest confirmation round any of `configs` has a run of (0: none)."""
    numbers = {t.number for t in configs}
    rounds = [
        int(t.user_attrs[TrialAttr.CONFIRM_ROUND])
        for t in study.get_trials(deepcopy=False)
        if _role(t) == Role.CONFIRM and t.user_attrs.get(TrialAttr.CONFIRM_OF) in numbers
    ]
    return max(rounds, default=-1) + 1


def _open_runs(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Confirmation runs queued or running, by any driver."""
    return [
        t
        for t in trials
        if _role(t) == Role.CONFIRM and t.state in (TrialState.WAITING, TrialState.RUNNING)
    ]
