"""The confirmation stage: re-run the top candidates and the baseline, interleaved, fresh starts.

A search keeps the config whose one run scored highest, and the highest of several noisy runs is
high partly by luck (regression to the mean). Confirmation re-runs the top K candidates and the
baseline R more times each, round by round (baseline, c1, c2, baseline, c1, c2, ...), each run a
fresh server start through the same workers. The runs are trials of role "confirm"
(`tuner.study.search.roles`): stored like trials and counted in the study's GPU time, never sampled
from, never counted toward `--n-trials`, never pruned. `tuner export` then decides on the
confirmation rounds alone, paired round by round with the baseline (`tuner.results.decision`).

The guard always has its floor: the baseline's round-0 run is its second start, which the
correctness probe needs to tell a changed output from restart noise. Every study with a
candidate gets it, with `--confirm 0` too (then it is the only run). It runs first, so the
candidates the probe flags are known before the slots are given out: confirmation skips them
and takes the next candidate by search score.

Nothing measured disappears: a candidate's failed confirmation start stays failed and counts
against it (`tuner export` does not export it and says which start failed); a failed baseline
run leaves its round unpaired, so it is run again (up to `BASELINE_ATTEMPTS` starts a round),
by this stage and by a later `tuner confirm`.

Lifecycle of `confirm_study`:

1. Load the study and its preset; store the between-run noise the verdicts use.
2. Run the floor start (the baseline's round 0) unless it ran.
3. Judge the probe; rank the unflagged, completed, feasible candidates by search-time value.
4. Queue the runs a previous (or interrupted) confirmation has not finished: a resumed study
   confirms without repeating or losing runs; run the queue
   (`tuner.study.search.driver.run_waiting`); queue a failed baseline round again and run it.
5. Judge every config and write the verdicts, the workload mode and its meaning as study user
   attributes, which optuna-dashboard shows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr, is_feasible, is_infeasible, role_from
from tuner.errors import ConfigError, StudyError

if TYPE_CHECKING:
    from tuner.metrics import BetweenRunNoise
    from tuner.study.space import Preset

__all__ = [
    "BASELINE_ATTEMPTS",
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

        Two cores run one server at a time at about two minutes a run, so CPU presets confirm
        one candidate, in three rounds: with two, a round spread above the recorded noise
        leaves a t-interval of one degree of freedom that a real win rarely clears (on the
        large grid's replay 1,3 exported a near-best config in 40% of studies at 25% of the
        grid's cost, 1,2 in 17%; simulated false wins 2.2% against 1.5%, power 97.4% against
        93.0%: docs/decisions.md). GPU studies afford the runner-up too.
        """
        if preset.confirm is not None:
            return cls(preset.confirm.top_k, preset.confirm.rounds)
        return cls(1, 3) if preset.gpu.cpu else cls(2, 2)


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


def _baseline(trials: list[FrozenTrial]) -> FrozenTrial | None:
    return next((t for t in trials if _role(t) == Role.BASELINE and is_feasible(t)), None)


def plan_confirmation(
    trials: list[FrozenTrial], k: int, *, skip: frozenset[int] | set[int] = frozenset()
) -> list[FrozenTrial]:
    """The baseline, then the top `k` feasible candidates by search-time value (best first),
    leaving out the trials in `skip` (configs the correctness probe flagged)."""
    base = _baseline(trials)
    if base is None:
        return []
    candidates = [
        t
        for t in trials
        if _role(t) == Role.CANDIDATE
        and is_feasible(t)
        and (t.params != base.params or TrialAttr.COPY_OF in t.user_attrs)
        and t.number not in skip
    ]
    # One run per config: a repeated params set is the same server.
    seen: list[dict[str, Any]] = []
    top: list[FrozenTrial] = []
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.params not in seen:
            seen.append(t.params)
            top.append(t)
    return [base, *top[:k]]


# Starts of the baseline a round gets before it is left unpaired: a missing baseline round is
# re-run, but a baseline that cannot start is not retried for ever.
BASELINE_ATTEMPTS: Final = 3


def _already(trials: list[FrozenTrial]) -> set[tuple[int, int]]:
    """(config, round) pairs done, running or queued; interrupted runs are re-queued by resume.

    A candidate's failed run is done (it counts against the config). The baseline's is not,
    until the round has failed `BASELINE_ATTEMPTS` times: its round is re-run.
    """
    keep = (TrialState.COMPLETE, TrialState.RUNNING, TrialState.WAITING, TrialState.PRUNED)
    base = _baseline(trials)
    done = set()
    base_failures: dict[int, int] = {}
    for t in trials:
        if _role(t) != Role.CONFIRM:
            continue
        key = (int(t.user_attrs[TrialAttr.CONFIRM_OF]), int(t.user_attrs[TrialAttr.CONFIRM_ROUND]))
        infeasible = t.state == TrialState.COMPLETE and is_infeasible(t)
        failed_for_good = (
            t.state == TrialState.FAIL
            and t.user_attrs.get(TrialAttr.FAILURE_KIND) not in (None, "interrupted")
        ) or infeasible
        if base is not None and key[0] == base.number and failed_for_good:
            base_failures[key[1]] = base_failures.get(key[1], 0) + 1
            if base_failures[key[1]] >= BASELINE_ATTEMPTS:
                done.add(key)
            continue
        if t.state in keep or failed_for_good:
            done.add(key)
    return done


def _enqueue(study: optuna.Study, params: dict[str, Any], attrs: dict[str, Any]) -> None:
    from tuner.study.search.roles import enqueue_run

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
    from tuner.results.study_reader import load_results

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
            "failed_confirmation_starts": list(v.failed_runs),
            "missing_baseline_rounds": list(v.missing_base_rounds),
        }
    study.set_user_attr(StudyAttr.CONFIRMATION, json.loads(json.dumps(verdicts)))
    if results.mode:
        study.set_user_attr(StudyAttr.MODE, results.mode)
        study.set_user_attr(StudyAttr.MODE_NOTE, results.mode_note)
    return verdicts


def _round(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


def store_noise(study: optuna.Study, preset: Preset) -> BetweenRunNoise:
    """The between-run noise the study's verdicts use, stored on the study once: the preset's
    `between_run`, else `tuner.metrics.DEFAULT_NOISE`. A stored value is kept (the verdicts
    of a study do not move when a later tuner changes its default)."""
    from tuner.metrics import DEFAULT_NOISE, BetweenRunNoise

    stored = BetweenRunNoise.from_json(study.user_attrs.get(StudyAttr.BETWEEN_RUN_NOISE))
    if stored is not None:
        return stored
    noise = DEFAULT_NOISE
    if preset.between_run is not None:
        noise = BetweenRunNoise(
            preset.between_run.log_sd, preset.between_run.df, "the preset's between_run"
        )
    study.set_user_attr(StudyAttr.BETWEEN_RUN_NOISE, noise.to_json())
    return noise


def flagged_configs(storage_url: str, study_name: str) -> set[int]:
    """Trial numbers whose outputs the correctness check flagged (against the floor)."""
    from tuner.results.decision import judge_study
    from tuner.results.study_reader import load_results

    verdicts = judge_study(load_results(storage_url, study_name))
    return {n for n, v in verdicts.items() if v.changes_outputs}


def _has_candidate(trials: list[FrozenTrial], base: FrozenTrial) -> bool:
    return any(
        _role(t) == Role.CANDIDATE
        and is_feasible(t)
        and (t.params != base.params or TrialAttr.COPY_OF in t.user_attrs)
        for t in trials
    )


def confirm_study(options: Any, plan: ConfirmPlan = DEFAULT_CONFIRM) -> ConfirmSummary:
    """Run (or finish) the confirmation stage of a study and record its verdicts.

    With `plan` off (`--confirm 0`) it still runs the floor start (the baseline's second
    start) when the study has a candidate, so the correctness probe has its floor.

    Args:
        options: `tuner.study.OptimizeOptions` naming the storage, study and cache.
        plan: How many candidates and rounds.

    Raises:
        StudyError: no such study, or no feasible baseline to confirm against.
    """
    from tuner.storage import normalize_url
    from tuner.study.search.driver import run_waiting
    from tuner.study.space import Preset

    if not options.study_name:
        raise StudyError("give --study NAME (the study to confirm)")
    url = normalize_url(options.storage_url)
    try:
        study = optuna.load_study(study_name=options.study_name, storage=url)
    except KeyError:
        raise StudyError(f"no study named {options.study_name!r} in this storage") from None
    stored = study.user_attrs.get(StudyAttr.PRESET)
    if stored is None:
        raise StudyError(
            f"study {options.study_name!r} has no stored preset (it was not written by "
            "`tuner optimize`), so there is nothing to re-run: confirm a study that tuner "
            "optimize created"
        )
    preset = Preset.model_validate(stored)
    store_noise(study, preset)

    def run_queue() -> optuna.Study:
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            run_waiting(preset, options)
        return optuna.load_study(study_name=options.study_name, storage=url)

    trials = study.get_trials(deepcopy=False)
    base = _baseline(trials)
    if base is None and plan.enabled:
        raise StudyError(
            f"study {study.study_name!r} has no completed baseline to confirm against; "
            "run `tuner optimize` first"
        )
    queued = 0
    configs: list[FrozenTrial] = []
    if base is not None and _has_candidate(trials, base):
        # The floor start first: the probe's verdicts decide which candidates get the slots.
        queued += queue_rounds(study, [base], 1)
        study = run_queue()
        skip = flagged_configs(options.storage_url, study.study_name)
        configs = plan_confirmation(study.get_trials(deepcopy=False), plan.k, skip=skip)
        # The baseline alone has nothing to be paired with: re-running it would cost server
        # starts and decide nothing (a study of --n-trials 1, or one whose candidates all
        # failed or were flagged).
        if plan.enabled and len(configs) > 1:
            # The second pass re-runs a baseline round that failed in the first.
            for _ in range(BASELINE_ATTEMPTS):
                more = queue_rounds(study, configs, plan.rounds)
                if not more:
                    break
                queued += more
                study = run_queue()
    verdicts = record_verdicts(study, options.storage_url)
    return ConfirmSummary(tuple(t.number for t in configs), queued, verdicts)
