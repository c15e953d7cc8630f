"""Trial roles: which trials the sampler learns from, which count, and how extra runs are queued.

A study holds two kinds of trials:

- **sampled** roles, `baseline` and `candidate`: the search itself. The sampler learns from them,
  they count toward `--n-trials`, the pruner may stop candidates, and a candidate whose params
  repeat another sampled trial's is a duplicate.
- **extra** roles, `control` (`tuner explain`), `confirm` (re-runs of top candidates and the
  baseline) and `baseline_rerun` (the baseline started again during the search, every
  `--baseline-every` sampled trials: the study's own measure of its drift and noise,
  `rerun_due`): measurements asked for on purpose, often with the params of another trial and a
  changed server. They never reach the sampler (it samples from a view of the sampled trials
  only, see `tuner.study.search.sampling`), never count toward `--n-trials`, are never pruned and
  are never duplicate-checked.

`enqueue_run` queues an extra run; `tuner.study.search.driver.run_waiting` runs the queue. This
module imports neither Ray nor the driver, so reports and `tuner explain` may use it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, role_from

__all__ = [
    "DEFAULT_BASELINE_EVERY",
    "EXTRA_ROLES",
    "SAMPLED_ROLES",
    "counts_toward_budget",
    "enqueue_baseline_copy",
    "enqueue_baseline_rerun",
    "enqueue_run",
    "is_sampled",
    "rerun_due",
    "role_of",
    "search_reruns",
]

SAMPLED_ROLES: Final = (Role.BASELINE, Role.CANDIDATE)
EXTRA_ROLES: Final = (Role.CONTROL, Role.CONFIRM, Role.BASELINE_RERUN)

# Re-run the baseline after every 5 sampled trials (`--baseline-every`). From the fitted noise
# model (benchmarks/data/noise-model.json): the recorded sessions drift up to 0.76% a run (the
# small grid, 95% interval to 1.35%; the large grid -0.51%) against a between-start sd of 0.046
# (pooled over 16 df). Between two starts of the baseline a linear drift is interpolated away;
# a trial after the last start is judged against that latest start until a later one comes
# (the confirmation's baseline runs, at export), so during the search it carries up to K - 1
# runs of drift: with K = 5, 4 x 0.76% = 3.0%, under one start's sd (5.4% at the interval's
# end, about one sd), for 1 extra start in 5 (a 20-trial search: 3 re-runs, 4 baseline
# starts, 2 df for the noise once a drift line is fitted). K = 10 leaves 6.8% (12%), more than
# a start's sd; K = 3 costs 1 start in 3. benchmarks/search_drift_sim.py (at 95daa70)
# simulated a search of copies at the fitted drifts (docs/decisions.md: K = 5 keeps a copy's
# mean |log ratio| at 0.047-0.049 against 0.07-0.14 without re-runs); benchmarks/decision_sim.py
# simulates the confirmation, not the search.
DEFAULT_BASELINE_EVERY: Final = 5

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


def rerun_due(trials: Sequence[FrozenTrial], every: int) -> bool:
    """Whether the baseline is due to run again: `every` sampled candidates have been measured
    (`counts_toward_budget`) since the last baseline start, and no re-run is queued or running.

    Decided from the stored trials alone, so a resumed or second driver neither loses a due
    re-run nor queues it twice (an interrupted re-run comes back queued, `requeue`, and that
    queued copy holds the next one back). `every` <= 0: never.
    """
    if every <= 0:
        return False
    runs = [t for t in trials if role_of(t) in (Role.BASELINE, Role.BASELINE_RERUN)]
    if not runs or any(t.state in (TrialState.WAITING, TrialState.RUNNING) for t in runs):
        return False
    last = max(t.number for t in runs)
    since = sum(
        1
        for t in trials
        if t.number > last and role_of(t) == Role.CANDIDATE and counts_toward_budget(t)
    )
    return since >= every


def search_reruns(n_trials: int, every: int) -> int:
    """Baseline re-runs a new study's search of `n_trials` (its baseline among them) makes.

    `rerun_due` queues one before a proposal once `every` candidates are measured since the
    last baseline start; the search ends at its target without one. So a search of
    n_trials - 1 candidates runs one before candidate every + 1, 2 x every + 1, ...: 3 in a
    20-trial search at every = 5, none in 6 trials. `every` <= 0: none.
    """
    candidates = n_trials - 1
    if every <= 0 or candidates <= every:
        return 0
    return (candidates - 1) // every


def enqueue_baseline_rerun(study: optuna.Study, params: Mapping[str, Any]) -> None:
    """Queue the baseline's config as a `baseline_rerun` (an extra run: never counted toward
    `--n-trials`, never seen by the sampler, never duplicate-checked)."""
    enqueue_run(study, params, role=Role.BASELINE_RERUN)


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
        role: `Role.CONTROL`, `Role.CONFIRM` or `Role.BASELINE_RERUN` (see the module
            docstring for what that guarantees).
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
