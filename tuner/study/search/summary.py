"""What a finished `optimize()` or `run_waiting()` leaves behind: `StudySummary`, read from the
study and the loop's outcome (`summarize`), with one line for the user when the run stopped
short of its target or continued another's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tuner.attrs import is_feasible
from tuner.study.search.display import ran_params
from tuner.study.search.loop_settings import LoopOutcome
from tuner.study.search.resume import counted
from tuner.study.search.roles import is_sampled

__all__ = ["StudySummary", "summarize"]


@dataclass(frozen=True)
class StudySummary:
    """What a finished `optimize()` call leaves behind."""

    study_name: str
    finished: int
    states: dict[str, int]
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    recovered: tuple[int, ...]
    target: int | None = None
    # One line for the user when the run stopped short of its target or continued another's.
    note: str | None = None


def _note(outcome: LoopOutcome, done: int) -> str | None:
    if outcome.confirm_pending:
        return (
            "search: none this run; an earlier run was stopped during its confirmation stage, "
            "which this one finishes (run the command again afterwards to search more)"
        )
    if outcome.budget_stopped:
        return (
            f"search: stopped at {done} trials, the budget's time left being what the "
            "confirmation needs"
        )
    if outcome.exhausted_size is not None:
        return (
            f"all {outcome.exhausted_size} distinct configurations of this space are measured; "
            f"stopped at {done} of {outcome.target} trials"
        )
    if outcome.target is not None and done < outcome.target:
        return f"stopped at {done} of {outcome.target} trials; the same command continues"
    if outcome.resumed_target:
        return f"continued an unfinished run to its {outcome.target} trials"
    return None


def summarize(study: optuna.Study, outcome: LoopOutcome) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    feasible = [t for t in trials if is_sampled(t) and is_feasible(t)]
    best: FrozenTrial | None = max(feasible, key=lambda t: t.value or 0.0, default=None)
    done = counted(trials)
    return StudySummary(
        study_name=study.study_name,
        finished=done,
        states=states,
        best_number=best.number if best else None,
        best_value=best.value if best else None,
        # What the server ran: a Mamba clamp shows as the max_num_seqs it served with.
        best_params=ran_params(dict(best.params), best.user_attrs) if best else {},
        recovered=outcome.recovered,
        target=outcome.target,
        note=_note(outcome, done),
    )
