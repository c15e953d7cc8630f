"""The confirmation stage with several drivers: run the queued runs here, wait for those another
driver is running (recovering a dead driver's), and end the stage only when no run is open.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import StudyAttr, TrialAttr
from tuner.study.stages.confirm_rounds import _open_runs

__all__ = [
    "WAIT_POLL_S",
    "end_stage",
]


# How often a driver looks again at the confirmation runs another driver is running.
WAIT_POLL_S: Final = 2.0


def end_stage(url: str, study: optuna.Study) -> bool:
    """Clear `StudyAttr.CONFIRM_PENDING` (the stage is over) unless a confirmation run is still
    queued or running: another driver's stage is not over (it may have a later budget, or
    a round this one did not need), and if that driver is killed, the next `tuner optimize`
    must still find the stage pending and finish it rather than search. That driver clears it
    when its own stage ends. Under the confirm lock, as rounds are queued, so no round is
    queued between the check and the write. Returns whether it was cleared."""
    from tuner.storage.locks import study_lock

    with study_lock(url, study.study_name, "confirm"):
        if _open_runs(study.get_trials(deepcopy=False)):
            return False
        study.set_user_attr(StudyAttr.CONFIRM_PENDING, False)
        return True


def _settle(
    url: str,
    study_name: str,
    run_queue: Callable[[], optuna.Study],
    say: Callable[[str], None],
    poll_s: float = WAIT_POLL_S,
) -> optuna.Study:
    """Run the queued runs here, then wait for the confirmation runs other drivers are
    running, until none is queued or running; returns the study, read again.

    Runs of a dead driver come back: `recover` fails them as interrupted and re-queues them
    (a driver on this host at once, by its pid; another host's by its stale heartbeat), and
    they run here. A RUNNING run held by this very process is one nothing runs any more (its
    loop has returned), so it is re-queued too.
    """
    from tuner.storage import Store
    from tuner.study.search.resume import (
        heartbeat_storage,
        mark_interrupted,
        recover,
        this_driver,
    )

    me = this_driver()
    said: tuple[int, ...] = ()
    watcher: optuna.Study | None = None
    store: Store | None = None
    try:
        while True:
            study = run_queue()
            running = [
                t for t in _open_runs(study.get_trials(deepcopy=False))
                if t.state == TrialState.RUNNING
            ]  # fmt: skip
            if not running:
                if not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
                    return study
                continue
            if watcher is None or store is None:
                # Heartbeats on, so the stale trials of another host's dead driver are seen.
                watcher = optuna.load_study(study_name=study_name, storage=heartbeat_storage(url))
                store = Store(url)
            for t in running:
                if t.user_attrs.get(TrialAttr.DRIVER) == me:
                    mark_interrupted(
                        watcher, t.number, "the driver stopped before this trial finished"
                    )
            numbers = tuple(t.number for t in running)
            if numbers != said:
                said = numbers
                holders = sorted(
                    {
                        str((t.user_attrs.get(TrialAttr.DRIVER) or {}).get("pid", "?"))
                        for t in running
                    }
                )
                say(
                    f"confirmation: waiting for {_runs(running)} of another driver "
                    f"(pid {', '.join(holders)}); each is run once for the study"
                )
            time.sleep(poll_s)
            recover(watcher, store)
    finally:
        if store is not None:
            store.close()


def _runs(trials: list[FrozenTrial]) -> str:
    """E.g. "run #7 (confirmation of #2, round 1)", rounds counted from 1 as the progress
    lines count them, or "runs #7, #8"."""
    if len(trials) == 1:
        t = trials[0]
        of = t.user_attrs.get(TrialAttr.CONFIRM_OF)
        round_ = int(t.user_attrs.get(TrialAttr.CONFIRM_ROUND, 0)) + 1
        return f"run #{t.number} (confirmation of #{of}, round {round_})"
    return "runs " + ", ".join(f"#{t.number}" for t in trials)
