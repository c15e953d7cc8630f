"""The study loop under `--budget`: the search's target from the budget's plan, the guard that
starts no trial the budget cannot pay for, and what each finished run teaches the budget.

`LoopBudget` is that half of `tuner.study.search.loop.StudyLoop`, which inherits it; the plan and
its guards themselves are `tuner.study.search.budget.Budget`'s. Without a budget every guard
allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import StudyAttr, is_feasible
from tuner.study.search.display import StudyDisplay

if TYPE_CHECKING:
    from tuner.study.search.loop_settings import LoopSettings, _Running
    from tuner.study.trial.backend import Finished

__all__ = ["LoopBudget"]


class LoopBudget:
    """The budget's side of the loop (`StudyLoop`'s base)."""

    # The loop's state (`tuner.study.search.loop.StudyLoop.__init__` sets it).
    study: optuna.Study
    settings: LoopSettings
    display: StudyDisplay
    configs: list[dict[str, Any]] | None
    target: int | None
    _base_done: int
    _budget_stopped: bool
    _said_plan: tuple[int, int, int] | None

    if TYPE_CHECKING:

        def _trials(self, *, fresh: bool = False) -> list[FrozenTrial]: ...

    def _set_budget_target(self, trials: int) -> None:
        """The search's target: this run's planned trials on top of those before it."""
        self.target = self._base_done + max(trials, 0)
        self.study.set_user_attr(StudyAttr.TARGET, self.target)
        self.display.total = self.target

    def _budget_allows(self) -> bool:
        """The budget's guard for one more search run (always True without a budget)."""
        budget = self.settings.budget
        if budget is None or self.target is None:
            return True
        plan = budget.plan()
        allowed = budget.may_start_search(plan.confirm_runs if plan is not None else 0)
        self._budget_stopped = not allowed
        return allowed

    def _budget_measure(self, run: _Running, finished: Finished, seconds: float) -> None:
        """The budget learns the run's cost; in a search its plan is revised on it."""
        budget = self.settings.budget
        assert budget is not None
        trial = next((t for t in self._trials() if t.number == run.trial.number), None)
        full = (
            finished.result is not None
            and trial is not None
            and trial.state == TrialState.COMPLETE
            and is_feasible(trial)
        )
        budget.run_finished(seconds, full=full, search=self.target is not None)
        if self.target is None or self.configs is None:
            return
        budget.space_size = len(self.configs)
        plan = budget.plan()
        if plan is None:
            return
        self._set_budget_target(plan.trials)
        lines = self.display.lines
        if lines is None:
            return
        lines.later_runs, lines.confirm_cap = plan.confirm_runs, plan.rounds or None
        said = (plan.trials, plan.k, plan.rounds)
        if said != self._said_plan and budget.measured:  # the first measured run, or a change
            self._said_plan = said
            lines.say(budget.revised_line(plan))
