"""The confirmation stage's sequential looks: run rounds, look at the verdict on them
(`tuner.results.export.confirmation_look`), stop or drop the futile configs and run one more;
and the drops an earlier look made, found again on the same runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial

from tuner.attrs import Role

if TYPE_CHECKING:
    from tuner.results.export_rule import Look
    from tuner.results.rows import StudyResults
    from tuner.study.stages.confirm_plan import ConfirmPlan


__all__ = [
    "run_looks",
]


def run_looks(
    configs: Sequence[FrozenTrial],
    rounds: int,
    dropped: set[int],
    run_rounds: Callable[[list[FrozenTrial], int], int],
    look: Callable[[int], Look],
    say: Callable[[str], None] = lambda line: None,
) -> tuple[int, tuple[int, str]]:
    """The stage's sequential rounds (step 4 of `confirm_study`): run the first `rounds`
    rounds of every config not `dropped` (`run_rounds(live, rounds)` queues the runs they lack
    and returns once all are finished, with how many it queued), look at the verdict on them
    (`look(rounds)`: `tuner.results.export.confirmation_look`), stop, or drop the futile
    configs and run one more round. `dropped` grows with the drops.

    Returns:
        (runs queued, (rounds run, why the stage stopped)). `confirm_study` runs it on the
        study's storage; benchmarks/sample_efficiency.py on its replayed runs.
    """
    queued = 0
    while True:
        live = [c for c in configs if c.number not in dropped]
        queued += run_rounds(live, rounds)
        seen = look(rounds)
        stop = f"stopped after {rounds} round{'s' if rounds != 1 else ''}"
        say(f"confirmation: {stop if seen.stop else 'look'}: {seen.reason}")
        if seen.stop:
            return queued, (rounds, seen.reason)
        dropped |= set(seen.futile)
        rounds += 1


def _dropped_before(options: Any, study_name: str, rounds: int, plan: ConfirmPlan) -> set[int]:
    """The configs the looks before round `rounds` dropped (futile while the stage went on).

    Each look is a function of the runs of its rounds, so looking again gives the drops the
    stage made before it was interrupted, or another driver's: none of them is run again."""
    dropped: set[int] = set()
    for r in range(plan.first_look, min(rounds, plan.rounds)):
        look = _look(options, study_name, r, plan)
        if not look.stop:
            dropped |= set(look.futile)
    return dropped


def _look(options: Any, study_name: str, rounds: int, plan: ConfirmPlan) -> Look:
    """The verdict after `rounds` rounds: stop or one more (`tuner.results.export_rule`)."""
    from tuner.results.export import confirmation_look
    from tuner.results.study_reader import load_results

    results = _first_rounds(load_results(options.storage_url, study_name), rounds)
    return confirmation_look(results, rounds, plan.first_look, plan.rounds)


def _first_rounds(results: StudyResults, rounds: int) -> StudyResults:
    """`results` without the confirmation runs of round `rounds` and later: the look after
    `rounds` rounds is about those rounds, even where a quicker driver has begun the next."""
    kept = tuple(
        t
        for t in results.trials
        if t.role != Role.CONFIRM or t.confirm_round is None or t.confirm_round < rounds
    )
    return replace(results, trials=kept)
