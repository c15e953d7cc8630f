"""Trial roles: which trials the sampler learns from, which count, and how extra runs are queued.

A study holds two kinds of trials:

- **sampled** roles, `baseline` and `candidate`: the search itself. The sampler learns from them,
  they count toward `--n-trials`, the pruner may stop candidates, and a candidate whose params
  repeat another sampled trial's is a duplicate.
- **extra** roles, `control` (`tuner explain`) and `confirm` (re-runs of top candidates and the
  baseline): measurements asked for on purpose, often with the params of another trial and a
  changed server. They never reach the sampler (it samples from a view of the sampled trials
  only, see `tuner.study.search.sampling`), never count toward `--n-trials`, are never pruned and
  are never duplicate-checked.

`enqueue_run` queues an extra run; `tuner.study.search.driver.run_waiting` runs the queue. This
module imports neither Ray nor the driver, so reports and `tuner explain` may use it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, role_from

__all__ = [
    "EXTRA_ROLES",
    "SAMPLED_ROLES",
    "counts_toward_budget",
    "enqueue_baseline_copy",
    "enqueue_run",
    "is_sampled",
    "role_of",
]

SAMPLED_ROLES: Final = (Role.BASELINE, Role.CANDIDATE)
EXTRA_ROLES: Final = (Role.CONTROL, Role.CONFIRM)

# FAIL kinds that say nothing about the config: the driver or its worker went away, or the
# trial repeated another's params. They never count toward --n-trials.
NOT_MEASURED_KINDS: Final = frozenset({"interrupted", "duplicate", "worker_crashed"})


def role_of(trial: FrozenTrial) -> str:
    """The trial's role; trials written before roles existed are baseline (0) or candidates."""
    return role_from(trial.user_attrs, trial.number)


def is_sampled(trial: FrozenTrial) -> bool:
    """True for trials of the search itself (what the sampler may learn from)."""
    return role_of(trial) in SAMPLED_ROLES


def counts_toward_budget(trial: FrozenTrial) -> bool:
    """True for a sampled trial that started (or tried to start) a server and finished.

    Complete, pruned, infeasible and failed trials count. Interrupted trials, duplicates and a
    first worker crash (it is re-queued) do not; nor does any extra-role trial.
    """
    if not is_sampled(trial):
        return False
    if trial.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    if trial.state != TrialState.FAIL:
        return False
    kind = trial.user_attrs.get(TrialAttr.FAILURE_KIND)
    if kind is None:  # failed by Optuna's heartbeat check: the driver died
        return False
    if kind == "worker_crashed":
        # A crash of a retried trial is the config's own doing: it counts, and is not retried.
        return TrialAttr.REQUEUED_FROM in trial.user_attrs
    return kind not in NOT_MEASURED_KINDS


def enqueue_baseline_copy(study: optuna.Study, params: Mapping[str, Any]) -> bool:
    """Queue the baseline's config again as a candidate (an A/A check), once per study.

    The copy counts toward `--n-trials` like any candidate and is judged like one: an export
    that says it beats the baseline is a false win. True when it was queued.
    """
    trials = study.get_trials(deepcopy=False)
    if any(TrialAttr.COPY_OF in t.user_attrs for t in trials):
        return False
    base = next((t.number for t in trials if role_of(t) == Role.BASELINE), 0)
    study.enqueue_trial(
        dict(params),
        user_attrs={TrialAttr.ROLE: str(Role.CANDIDATE), TrialAttr.COPY_OF: base},
        skip_if_exists=False,
    )
    return True


def enqueue_run(
    study: optuna.Study,
    params: Mapping[str, Any],
    *,
    role: Role,
    attrs: Mapping[str, Any] | None = None,
) -> None:
    """Queue one extra run (a control or a confirmation) as a WAITING trial of the study.

    Args:
        study: The study to add it to.
        params: The Optuna params the server is built from (`Preset.server_spec`); a control's
            changes to that server go in `attrs[TrialAttr.SPEC_OVERRIDES]`.
        role: `Role.CONTROL` or `Role.CONFIRM` (see the module docstring for what that guarantees).
        attrs: Further user attributes (e.g. `TrialAttr.CONTROL_OF`); they are copied to a
            re-queued trial if the run is interrupted.

    Raises:
        ValueError: `role` is not an extra role, or `attrs` sets the role itself.
    """
    if role not in EXTRA_ROLES:
        extra = ", ".join(EXTRA_ROLES)
        raise ValueError(f"enqueue_run queues extra runs ({extra}), not {str(role)!r}")
    user_attrs = dict(attrs or {})
    if TrialAttr.ROLE in user_attrs:
        raise ValueError("give the role as role=..., not in attrs")
    user_attrs[TrialAttr.ROLE] = str(role)
    # skip_if_exists=False: a confirmation repeats params on purpose.
    study.enqueue_trial(dict(params), user_attrs=user_attrs, skip_if_exists=False)
