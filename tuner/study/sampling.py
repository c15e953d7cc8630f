"""What to try and when to stop: the sampler and pruner of every tuner study."""

from __future__ import annotations

import warnings

import optuna

__all__ = ["make_pruner", "make_sampler"]


def make_sampler(seed: int | None, n_trials: int) -> optuna.samplers.BaseSampler:
    """TPE over the conditional space; it learns feasibility from each trial's constraint.

    Infeasible configs (the server cannot start on this card) set a positive constraint with
    `Trial.set_constraint` (Optuna 5), which TPE reads without a constraints function.
    """
    with warnings.catch_warnings():
        # `multivariate` and `group` are marked experimental; tuner relies on them knowingly.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _tpe(seed, n_trials)


def _tpe(seed: int | None, n_trials: int) -> optuna.samplers.TPESampler:
    return optuna.samplers.TPESampler(
        multivariate=True,
        group=True,  # the space is conditional: depth and lookup exist only for some methods
        seed=seed,
        n_startup_trials=max(3, min(10, n_trials // 2)),
    )


def make_pruner(tasks: int) -> optuna.pruners.BasePruner:
    """Stop trials whose running tasks/h is clearly losing."""
    # "Clearly losing": below the 25th percentile of earlier trials at the same number of
    # finished tasks, and only after a third of the tasks, when the rate has settled.
    return optuna.pruners.PercentilePruner(
        25.0, n_startup_trials=2, n_warmup_steps=max(1, tasks // 3)
    )
