"""The confirmation stage: re-run the top candidates and the baseline, interleaved, fresh starts.

A search keeps the config whose one run scored highest, and the highest of several noisy runs is
high partly by luck (regression to the mean). Confirmation re-runs the top K candidates and the
baseline R more times each, round by round (baseline, c1, c2, baseline, c1, c2, ...), each run a
fresh server start through the same workers. The runs are trials of role "confirm"
(`tuner.study.roles`): stored like trials and counted in the study's GPU time, never sampled
from, never counted toward `--n-trials`, never pruned. `tuner export` then decides on the pooled
confirmation rounds, paired round by round with the baseline (`tuner.results.decision`), and
the second baseline start gives the correctness probe its floor.

Lifecycle of `confirm_study`:

1. Load the study and its preset; rank its completed, feasible candidates by search-time value.
2. Queue the runs a previous (or interrupted) confirmation has not finished: a resumed study
   confirms without repeating or losing runs.
3. Run the queue (`tuner.study.driver.run_waiting`).
4. Judge every config and write the verdicts, the workload mode and its meaning as study user
   attributes, which optuna-dashboard shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr, role_from
from tuner.errors import ConfigError, StudyError

if TYPE_CHECKING:
    from tuner.study.space import Preset

__all__ = [
    "DEFAULT_CONFIRM",
    "ConfirmPlan",
    "ConfirmSummary",
    "confirm_study",
    "parse_confirm",
    "plan_confirmation",
    "record_verdicts",
]


@dataclass(frozen=True)
class ConfirmPlan:
    """Top `k` candidates and the baseline, `rounds` more runs each (k = 0: no confirmation)."""

    k: int = 2
    rounds: int = 2

    @property
    def enabled(self) -> bool:
        """False when the stage is switched off (`--confirm 0`)."""
        return self.k > 0 and self.rounds > 0

    @classmethod
    def for_preset(cls, preset: Preset) -> ConfirmPlan:
        """The preset's `confirm`, else the default for its hardware.

        Two cores run one server at a time at about two minutes a run: one candidate keeps the
        CPU main command near twenty minutes; GPU studies afford the runner-up too.
        """
        if preset.confirm is not None:
            return cls(preset.confirm.top_k, preset.confirm.rounds)
        return cls(1, 2) if preset.gpu.cpu else cls(2, 2)


DEFAULT_CONFIRM: Final = ConfirmPlan()


def parse_confirm(text: str) -> ConfirmPlan:
    """`K,R` (or `0` for off) from the command line.

    Raises:
        ConfigError: not two non-negative integers.
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        numbers = []
    if numbers == [0]:
        return ConfirmPlan(0, 0)
    if len(numbers) != 2 or min(numbers) < 0:
        raise ConfigError(
            f"--confirm {text!r}: give K,R (top K candidates, R rounds each), e.g. 2,2, "
            "or 0 to skip confirmation"
        )
    return ConfirmPlan(numbers[0], numbers[1])


@dataclass(frozen=True)
class ConfirmSummary:
    """What the stage queued and what it concluded."""

    configs: tuple[int, ...]  # trial numbers confirmed, the baseline first
    queued: int
    verdicts: dict[str, dict[str, Any]]


def _role(t: FrozenTrial) -> str:
    return role_from(t.user_attrs, t.number)


def _feasible(t: FrozenTrial) -> bool:
    return (
        t.state == TrialState.COMPLETE
        and t.value is not None
        and not t.user_attrs.get(TrialAttr.INFEASIBLE)
        and not any(v > 0 for v in t.constraints.values())
    )


def plan_confirmation(trials: list[FrozenTrial], k: int) -> list[FrozenTrial]:
    """The baseline, then the top `k` feasible candidates by search-time value (best first)."""
    base = next((t for t in trials if _role(t) == Role.BASELINE and _feasible(t)), None)
    if base is None:
        return []
    candidates = [
        t for t in trials if _role(t) == Role.CANDIDATE and _feasible(t) and t.params != base.params
    ]
    # One run per config: a repeated params set is the same server.
    seen: list[dict[str, Any]] = []
    top: list[FrozenTrial] = []
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.params not in seen:
            seen.append(t.params)
            top.append(t)
    return [base, *top[:k]]


def _already(trials: list[FrozenTrial]) -> set[tuple[int, int]]:
    """(config, round) pairs done, running or queued; interrupted runs are re-queued by resume."""
    keep = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.PRUNED)
    done = set()
    for t in trials:
        if _role(t) != Role.CONFIRM:
            continue
        failed_for_good = t.state == TrialState.FAIL and t.user_attrs.get(
            TrialAttr.FAILURE_KIND
        ) not in (None, "interrupted")
        if t.state in keep or failed_for_good:
            done.add(
                (
                    int(t.user_attrs[TrialAttr.CONFIRM_OF]),
                    int(t.user_attrs[TrialAttr.CONFIRM_ROUND]),
                )
            )
    return done


def _enqueue(study: optuna.Study, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    from tuner.study.roles import enqueue_run

    enqueue_run(study, params, role=Role.CONFIRM, attrs=attrs)


def queue_rounds(study: optuna.Study, configs: list[FrozenTrial], rounds: int) -> int:
    """Queue the missing runs round by round (A B C A B C ...); returns how many were queued."""
    done = _already(study.get_trials(deepcopy=False))
    queued = 0
    for round_ in range(rounds):
        for t in configs:
            if (t.number, round_) in done:
                continue
            attrs = {TrialAttr.CONFIRM_OF: t.number, TrialAttr.CONFIRM_ROUND: round_}
            _enqueue(study, dict(t.params), attrs)
            queued += 1
    return queued


def record_verdicts(study: optuna.Study, storage_url: str) -> dict[str, dict[str, Any]]:
    """Judge the study's configs and write verdicts, mode and its meaning as study attributes."""
    from tuner.results.decision import judge_study
    from tuner.results.loading import load_results

    results = load_results(storage_url, study.study_name)
    verdicts: dict[str, dict[str, Any]] = {}
    for number, v in judge_study(results).items():
        verdicts[str(number)] = {
            "config": v.trial.label,
            "search_tasks_per_hour": _round(v.search_tph),
            "confirmed_tasks_per_hour": _round(v.confirmed_tph),
            "confirmation_runs": v.confirmed_runs,
            "paired_vs_baseline": v.paired.describe() if v.paired else None,
            "beats_baseline": v.beats_baseline,
            "correctness": v.correctness(),
            "changes_outputs": v.changes_outputs,
        }
    study.set_user_attr(StudyAttr.CONFIRMATION, json.loads(json.dumps(verdicts)))
    if results.mode:
        study.set_user_attr(StudyAttr.MODE, results.mode)
        study.set_user_attr(StudyAttr.MODE_NOTE, results.mode_note)
    return verdicts


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def confirm_study(options: Any, plan: ConfirmPlan = DEFAULT_CONFIRM) -> ConfirmSummary:
    """Run (or finish) the confirmation stage of a study and record its verdicts.

    Args:
        options: `tuner.study.OptimizeOptions` naming the storage, study and cache.
        plan: How many candidates and rounds.

    Raises:
        StudyError: no such study, or no feasible baseline to confirm against.
    """
    from tuner.storage import normalize_url
    from tuner.study.driver import run_waiting
    from tuner.study.space import Preset

    if not options.study_name:
        raise StudyError("give --study NAME (the study to confirm)")
    url = normalize_url(options.storage_url)
    try:
        study = optuna.load_study(study_name=options.study_name, storage=url)
    except KeyError:
        raise StudyError(f"no study named {options.study_name!r} in this storage") from None
    preset = Preset.model_validate(study.user_attrs[StudyAttr.PRESET])
    configs = plan_confirmation(study.get_trials(deepcopy=False), plan.k)
    queued = 0
    if plan.enabled:
        if not configs:
            raise StudyError(
                f"study {study.study_name!r} has no completed baseline to confirm against; "
                "run `tuner optimize` first"
            )
        # The baseline alone has nothing to be paired with: re-running it would cost server
        # starts and decide nothing (a study of --n-trials 1, or one whose candidates all failed).
        if len(configs) > 1:
            queued = queue_rounds(study, configs, plan.rounds)
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            run_waiting(preset, options)
        study = optuna.load_study(study_name=options.study_name, storage=url)
    verdicts = record_verdicts(study, options.storage_url)
    return ConfirmSummary(tuple(t.number for t in configs), queued, verdicts)
