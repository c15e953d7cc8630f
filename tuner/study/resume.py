"""Resuming a study: one driver at a time, interrupted trials marked and re-queued.

A driver killed mid-trial leaves its trial RUNNING in Optuna's storage (workers never write,
so no partial rows of it exist unless the kill fell between writing rows and `tell`). The next
run marks such trials FAIL with reason "interrupted", deletes any rows they had, and enqueues
their parameters again, so no trial is lost or counted twice.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import StudyError
from tuner.storage import Store
from tuner.study.attrs import StudyAttr, TrialAttr

__all__ = ["claim_study", "finished_count", "recover_interrupted"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_study(study: optuna.Study) -> None:
    """Record this process as the study's driver; refuse if another live driver holds it."""
    holder = study.user_attrs.get(StudyAttr.DRIVER) or {}
    host, pid = holder.get("host"), holder.get("pid")
    me = {"host": socket.gethostname(), "pid": os.getpid()}
    if host == me["host"] and isinstance(pid, int) and pid != me["pid"] and _alive(pid):
        raise StudyError(
            f"study {study.study_name!r} is being optimized by process {pid} on this host; "
            "wait for it, stop it, or use another --study name"
        )
    study.set_user_attr(StudyAttr.DRIVER, me)


def recover_interrupted(study: optuna.Study, store: Store) -> list[int]:
    """Mark RUNNING trials interrupted and re-queue their params; returns their numbers."""
    recovered = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        trial_api = optuna.trial.Trial(study, trial._trial_id)
        trial_api.set_user_attr(TrialAttr.FAILURE_KIND, "interrupted")
        trial_api.set_user_attr(
            TrialAttr.FAILURE_REASON, "the driver stopped before this trial finished; re-queued"
        )
        store.delete_trial(study.study_name, trial.number)
        study.tell(trial.number, state=TrialState.FAIL)
        attrs = {TrialAttr.REQUEUED_FROM: trial.number}
        for key in (
            TrialAttr.ROLE,
            TrialAttr.CONTROL_OF,
            TrialAttr.CONTROL_KIND,
            TrialAttr.SPEC_OVERRIDES,
        ):
            if key in trial.user_attrs:
                attrs[key] = trial.user_attrs[key]
        study.enqueue_trial(dict(trial.params), user_attrs=attrs, skip_if_exists=False)
        recovered.append(trial.number)
    return recovered


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """Finished candidate/baseline trials count; interrupted ones and controls do not."""
    if trial.user_attrs.get(TrialAttr.ROLE) == "control":
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    return trial.state == TrialState.FAIL and (
        trial.user_attrs.get(TrialAttr.FAILURE_KIND) != "interrupted"
    )


def finished_count(trials: Iterable[FrozenTrial]) -> int:
    """How many trials of the study's budget are done."""
    return sum(1 for t in trials if counts_toward_budget(t))
