"""Resuming and sharing a study: heartbeats, interrupted trials re-queued once, the run's budget.

Several drivers (processes, on one machine or many) may run one study on a shared database.
They coordinate only through Optuna's storage, the way Optuna documents it:

- Each driver records an RDB **heartbeat** for its running trials (`HEARTBEAT_INTERVAL_S`).
  A RUNNING trial whose heartbeat is older than `GRACE_PERIOD_S` belongs to a dead driver;
  `optuna.storages.fail_stale_trials` marks it FAIL and its failed-trial callback
  (`RequeueOnce`) queues it again once. A driver on the same host whose process is gone is
  recognized at once, without waiting for the grace period (its pid is on the trial).
- **Who gets how many retries**: a trial whose driver on this host was killed or stopped
  (failure kind `interrupted`) did nothing wrong, so it is queued again every time, as a chain
  (each copy names the one before in `requeued_from`), up to `MAX_INTERRUPTIONS`. A worker crash
  and a stale heartbeat of another host (the trial may have taken its machine down) are retried
  `MAX_RETRY` times: a second one is the config's own doing.
- **Atomic enough**: a trial is marked FAIL first (Optuna refuses a second FAIL, so exactly one
  driver claims it) and re-queued after. A kill between the two is repaired by `repair()`, which
  every start runs: an interrupted trial without its re-queued copy gets one, and rows a killed
  driver stored for a trial it never told are deleted (the re-run measures it again). No kill
  point loses a trial or the baseline, and nothing is counted twice.
- **The budget** (`budget_target`): `--n-trials N` asks for N more trials that start a server.
  The target (trials counted so far + N) is stored on the study; a run that ends early
  (killed, Ctrl-C, `--timeout`) leaves it pending, and the next run, or a second driver started
  on the same study meanwhile, works towards the pending target instead of adding N again.
"""

from __future__ import annotations

import os
import socket
import warnings
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.storage import Store
from tuner.storage.engine import keep_reconnecting
from tuner.study.search.roles import counts_toward_budget, role_of

__all__ = [
    "GRACE_PERIOD_S",
    "HEARTBEAT_INTERVAL_S",
    "MAX_INTERRUPTIONS",
    "MAX_RETRY",
    "RequeueOnce",
    "ask",
    "budget_target",
    "counted",
    "ensure_baseline",
    "heartbeat_storage",
    "mark_interrupted",
    "recover",
    "repair",
    "requeue",
    "this_driver",
]

HEARTBEAT_INTERVAL_S: Final = 10
GRACE_PERIOD_S: Final = 60
MAX_RETRY: Final = 1
# A driver killed over and over in the same trial: a bound, not a policy (each kill is a user's
# or the machine's doing, so the trial is queued again; a loop that never ends is not).
MAX_INTERRUPTIONS: Final = 20

# What a trial measured or how it ended: not copied to its re-queued run.
_RESULT_ATTRS: Final = frozenset(
    {
        TrialAttr.SERVER_SPEC,
        TrialAttr.SERVE_COMMAND,
        TrialAttr.MAX_NUM_SEQS_REQUESTED,
        TrialAttr.MAX_NUM_SEQS_CLAMPED,
        TrialAttr.KV_CACHE_TOKENS,
        TrialAttr.TASKS_PER_HOUR,
        TrialAttr.TASKS_PER_HOUR_LOW,
        TrialAttr.TASKS_PER_HOUR_HIGH,
        TrialAttr.SUCCESS_RATE,
        TrialAttr.CACHE_HIT_PCT,
        TrialAttr.ACCEPTANCE_RATE,
        TrialAttr.MEAN_ACCEPTANCE_LENGTH,
        TrialAttr.PREEMPTIONS,
        TrialAttr.ENERGY_PER_TASK_J,
        TrialAttr.GPU_MEMORY_MIB,
        TrialAttr.STARTUP_S,
        TrialAttr.START_PARTS,
        TrialAttr.TIMING,
        TrialAttr.FAILURE_KIND,
        TrialAttr.FAILURE_REASON,
        TrialAttr.INFEASIBLE,
        TrialAttr.PRUNED_AT_TASKS,
        TrialAttr.NOTES,
        TrialAttr.DRIVER,
        TrialAttr.REQUEUED_FROM,
        TrialAttr.DUPLICATE_OF,
    }
)


def this_driver() -> dict[str, Any]:
    """This process as a trial's driver: host and pid."""
    return {"host": socket.gethostname(), "pid": os.getpid()}


def heartbeat_storage(url: str) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage with heartbeats and the retry-once callback."""
    with warnings.catch_warnings():
        # Heartbeats are marked experimental; they are Optuna's documented way to share a study.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        storage = optuna.storages.RDBStorage(
            url,
            # A restarted Postgres mid-study: ping pooled connections, wait out refusals.
            engine_kwargs={"pool_pre_ping": True},
            heartbeat_interval=HEARTBEAT_INTERVAL_S,
            grace_period=GRACE_PERIOD_S,
            heartbeat_stale_trial_callback=RequeueOnce(),
        )
    keep_reconnecting(storage.engine)
    return storage


def ask(study: optuna.Study) -> optuna.Trial:
    """`study.ask()` on a heartbeat storage; the caller records the heartbeats itself.

    Optuna expects heartbeats with `Study.optimize`, whose thread beats for one trial; tuner's
    driver runs several trials at once through ask/tell and beats for each of them.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        return study.ask()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _params(trial: FrozenTrial) -> tuple[dict[str, Any], dict[str, Any]]:
    """(params, distributions); a trial killed before its params were suggested has none."""
    return dict(trial.params), dict(trial.distributions)


def requeue(study: optuna.Study, trial: FrozenTrial, *, interrupted: bool = False) -> int | None:
    """Queue a failed trial's run again; returns the new trial's number or None.

    `interrupted`: the trial's driver was killed or stopped, which is not the config's doing,
    so it is queued again however often that happened (up to `MAX_INTERRUPTIONS`); otherwise
    a trial is retried `MAX_RETRY` times. Idempotent: a trial with a re-queued copy is not
    queued twice.
    """
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > (MAX_INTERRUPTIONS if interrupted else MAX_RETRY):
        return None
    trials = study.get_trials(deepcopy=False)
    if any(t.user_attrs.get(TrialAttr.REQUEUED_FROM) == trial.number for t in trials):
        return None
    attrs = {k: v for k, v in trial.user_attrs.items() if k not in _RESULT_ATTRS}
    attrs[TrialAttr.REQUEUED_FROM] = trial.number
    # The same system attributes as Optuna's RetryHeartbeatStaleTrialCallback, so its
    # `retried_trial_number`/`retry_history` read these trials too.
    system: dict[str, Any] = {"failed_trial": history[0], "retry_history": history}
    params, distributions = _params(trial)
    fixed = trial.system_attrs.get("fixed_params")
    if not params and isinstance(fixed, dict):
        system["fixed_params"] = fixed
    study.add_trial(
        optuna.create_trial(
            state=TrialState.WAITING,
            params=params,
            distributions=distributions,
            user_attrs=attrs,
            system_attrs=system,
        )
    )
    return max(t.number for t in study.get_trials(deepcopy=False))


class RequeueOnce:
    """Optuna's heartbeat-stale callback: queue the dead driver's trial again, once."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        requeue(study, trial)


def mark_interrupted(study: optuna.Study, number: int, reason: str) -> bool:
    """Mark a RUNNING trial interrupted (FAIL) and re-queue it; False if another got it first."""
    trial_id = study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)
    api = optuna.trial.Trial(study, trial_id)
    try:
        api.set_user_attr(TrialAttr.FAILURE_KIND, "interrupted")
        api.set_user_attr(TrialAttr.FAILURE_REASON, reason)
        study.tell(number, state=TrialState.FAIL)
    except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
        return False  # finished meanwhile (another driver, or it was told after all)
    requeue(study, study._storage.get_trial(trial_id), interrupted=True)
    return True


def _interrupted(t: FrozenTrial) -> bool:
    kind = t.user_attrs.get(TrialAttr.FAILURE_KIND)
    if t.state != TrialState.FAIL:
        return False
    if kind is None or kind == "interrupted":
        return True
    return kind == "worker_crashed" and TrialAttr.REQUEUED_FROM not in t.user_attrs


def repair(study: optuna.Study, store: Store | None) -> None:
    """Repair what a kill between two steps left: missing re-queues, rows of untold trials."""
    trials = study.get_trials(deepcopy=False)
    broken = [t for t in trials if _interrupted(t)]
    requeued = {t.user_attrs.get(TrialAttr.REQUEUED_FROM) for t in trials}
    for t in broken:
        if t.number not in requeued:
            interrupted = t.user_attrs.get(TrialAttr.FAILURE_KIND) == "interrupted"
            requeue(study, t, interrupted=interrupted)
    if store is not None and broken:
        stored = set(store.trial_numbers(study.study_name))
        for t in broken:
            if t.number in stored:
                store.delete_trial(study.study_name, t.number)


def _dead(t: FrozenTrial, me: dict[str, Any]) -> bool:
    """A RUNNING trial whose driver is known to be gone without waiting for its heartbeat."""
    holder = t.user_attrs.get(TrialAttr.DRIVER)
    if not holder:
        # Killed between `ask` and its first heartbeat: nothing will ever beat for it.
        started = t.datetime_start or datetime.now()
        return (datetime.now() - started).total_seconds() > GRACE_PERIOD_S
    pid = holder.get("pid")
    if holder.get("host") != me["host"] or not isinstance(pid, int) or pid == me["pid"]:
        return False
    return not _alive(pid)


def recover(study: optuna.Study, store: Store | None) -> list[int]:
    """Fail and re-queue trials of dead drivers; returns the numbers recovered."""
    me = this_driver()
    recovered = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _dead(t, me) and mark_interrupted(
            study, t.number, "the driver stopped before this trial finished; re-queued"
        ):
            recovered.append(t.number)
    running = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # other hosts' dead drivers, by heartbeat
    still = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    recovered.extend(sorted(running - still))
    repair(study, store)
    return recovered


def ensure_baseline(study: optuna.Study, params: dict[str, Any]) -> bool:
    """Queue the baseline unless one is measured, running or queued; True when queued."""
    for t in study.get_trials(deepcopy=False):
        if role_of(t) == Role.BASELINE and (
            counts_toward_budget(t) or t.state in (TrialState.RUNNING, TrialState.WAITING)
        ):
            return False
    study.enqueue_trial(params, user_attrs={TrialAttr.ROLE: Role.BASELINE}, skip_if_exists=False)
    return True


def counted(trials: Iterable[FrozenTrial]) -> int:
    """Trials of the budget so far (see `tuner.study.search.roles.counts_toward_budget`)."""
    return sum(1 for t in trials if counts_toward_budget(t))


def budget_target(study: optuna.Study, n_trials: int) -> tuple[int, bool]:
    """The count this run works towards, and whether it continues an unfinished run's."""
    done = counted(study.get_trials(deepcopy=False))
    stored = study.user_attrs.get(StudyAttr.TARGET)
    if isinstance(stored, int) and stored > done:
        return stored, True
    target = done + n_trials
    study.set_user_attr(StudyAttr.TARGET, target)
    return target, False
