"""The confirmation stage under `--budget`: the finalists and rounds the time left buys, and the
guards that queue no run the budget cannot pay for (`tuner.study.search.budget` plans the
budget itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tuner.study.stages.confirm_plan import ConfirmPlan
from tuner.study.stages.confirm_rounds import missing_runs


def _left(budget: Any) -> str:
    from tuner.study.search.estimate import minutes

    return minutes(max(budget.left_s(), 0.0))


def _floor_fits(budget: Any, study: optuna.Study, base: FrozenTrial) -> bool:
    """Whether the floor start (when not run yet) fits the budget (no budget: it does)."""
    if budget is None:
        return True
    missing = missing_runs(study, [base], 1)
    return not missing or budget.fits(len(missing))


def _budget_plan(budget: Any, plan: ConfirmPlan, say: Callable[[str], None]) -> ConfirmPlan:
    """The finalists and rounds the budget's time left buys, `plan` being the cap."""
    k, rounds = budget.confirm_plan()
    run = budget.run_s()
    at = f" at about {run:.0f} s a run" if run is not None else ""
    if not k or not rounds:
        say(f"confirmation: no round fits the budget's {_left(budget)} left{at}")
        return ConfirmPlan(0, 0)
    planned = ConfirmPlan(min(k, plan.k), min(rounds, plan.rounds))
    say(
        f"confirmation: the budget's {_left(budget)} left{at} buys the top {planned.k} and the "
        f"baseline for up to {planned.rounds} round{'s' if planned.rounds != 1 else ''}"
    )
    return planned


def _next_round(study: optuna.Study, configs: list[FrozenTrial], rounds: int) -> int:
    """The rounds to have queued now under a budget: up to the first with a missing run (one
    round at a time, each checked against the time left), else all `rounds`."""
    missing = missing_runs(study, configs, rounds)
    return min((r for _, r in missing), default=rounds - 1) + 1


def _over_budget(
    budget: Any, study: optuna.Study, configs: list[FrozenTrial], rounds: int
) -> str | None:
    """Why the missing runs of the first `rounds` rounds cannot be queued (None: they fit, or
    there is no budget): the stop reason stored for the export."""
    if budget is None:
        return None
    need = len(missing_runs(study, configs, rounds))
    if not need or budget.fits(need):
        return None
    from tuner.study.search.estimate import minutes

    run = budget.run_s() or 0.0
    return (
        f"the budget: round {rounds} needs {need} run{'s' if need != 1 else ''} (about "
        f"{minutes(need * run)} at {run:.0f} s a run) and {_left(budget)} is left"
    )


class _BudgetStop(Exception):
    """A round the budget cannot pay for: the stage stops after `rounds` rounds."""

    def __init__(self, rounds: int, reason: str) -> None:
        super().__init__(reason)
        self.rounds = rounds
        self.reason = reason
