"""The confirmation stage under `--budget`: the finalists and rounds the time left buys, and the
guards that queue no run the budget cannot pay for (`tuner.study.search.budget` plans the
budget itself); without a budget, the power `--confirm`'s rounds have at the study's noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial

from tuner.study.stages.confirm_plan import ConfirmPlan
from tuner.study.stages.confirm_rounds import missing_runs

if TYPE_CHECKING:
    from tuner.metrics import BetweenRunNoise


def _left(budget: Any) -> str:
    from tuner.study.search.estimate import minutes

    return minutes(max(budget.left_s(), 0.0))


def _floor_fits(budget: Any, study: optuna.Study, base: FrozenTrial) -> bool:
    """Whether the floor start (when not run yet) fits the budget (no budget: it does)."""
    if budget is None:
        return True
    missing = missing_runs(study, [base], 1)
    return not missing or budget.fits(len(missing))


def _budget_plan(
    budget: Any, plan: ConfirmPlan, say: Callable[[str], None], noise: BetweenRunNoise | None
) -> ConfirmPlan:
    """The finalists and rounds the budget's time left buys (`Budget.confirm_choice`): the
    study's measured `noise` chooses both (the cheapest plan that reaches 80% power for a true
    +10% with slow starts, else the plan of most power the time left pays for), at most
    `plan`'s K finalists or, when the user fixed no K, the budget's `k_power`; the line says
    what that buys."""
    choice = budget.confirm_choice(noise)
    say(budget.confirm_line(choice))
    if not choice.k or not choice.rounds:
        return ConfirmPlan(0, 0)
    # The budget caps the finalists (`plan`'s K, or the power table's largest when the user
    # fixed none: `Budget.k_power`).
    return ConfirmPlan(choice.k, choice.rounds)


def fixed_power_line(k: int, rounds: int, noise: BetweenRunNoise) -> str:
    """What `--confirm`'s plan (no budget) runs and the power it has at the study's measured
    `noise`, and the rounds that would reach 80% when it falls short, e.g. "confirmation: the
    top 2 and the baseline for up to 10 rounds (--confirm 2,10); at this study's noise (x3.9
    the fitted, over 5 df) that is about 72% power for a true +10% (...); 80% needs 18
    rounds, --confirm 2,18"."""
    from tuner.study.search.budget import choice_at, power_words

    choice = choice_at(k, rounds, noise)
    head = (
        f"confirmation: the top {k} and the baseline for up to {rounds} "
        f"round{'s' if rounds != 1 else ''} (--confirm {k},{rounds})"
    )
    fix = None
    if choice.plan80 is not None and (choice.needed is None or choice.needed > rounds):
        fix = "--confirm {},{}".format(*choice.plan80)
    return power_words(head, choice, fix)


def measured_noise(storage_url: str, study_name: str) -> BetweenRunNoise:
    """The study's between-run noise as its verdicts will start from it: the stored prior
    updated by the baseline's own starts so far (`tuner.results.decision.study_noise`)."""
    from tuner.results.decision import study_noise
    from tuner.results.study_reader import load_results

    return study_noise(load_results(storage_url, study_name))


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


def queue_next_rounds(
    budget: Any,
    study: optuna.Study,
    live: list[FrozenTrial],
    rounds: int,
    queue: Callable[[list[FrozenTrial], int], int],
) -> tuple[int, int]:
    """One step of the stage's round loop: the rounds to have queued now (all `rounds`, or
    under a budget up to the first with a missing run, `_next_round`), refused with
    `_BudgetStop` when their missing runs do not fit (`_over_budget`), else queued by `queue`.
    Returns (runs queued, the rounds they complete)."""
    upto = rounds if budget is None else _next_round(study, live, rounds)
    short = _over_budget(budget, study, live, upto)
    if short is not None:
        raise _BudgetStop(upto - 1, short)
    return queue(live, upto), upto


class _BudgetStop(Exception):
    """A round the budget cannot pay for: the stage stops after `rounds` rounds."""

    def __init__(self, rounds: int, reason: str) -> None:
        super().__init__(reason)
        self.rounds = rounds
        self.reason = reason
