"""The confirmation stage: re-run the top candidates and the baseline, interleaved, fresh starts.

A search keeps the config whose one run scored highest, and the highest of several noisy runs is
high partly by luck (regression to the mean). Confirmation re-runs the top K candidates and the
baseline R more times each, round by round, the order alternating (baseline, c1, c2, then c2,
c1, baseline, ...: a linear drift of the machine cancels), each run a
fresh server start through the same workers. The runs are trials of role "confirm"
(`tuner.study.search.roles`): stored like trials and counted in the study's GPU time, never sampled
from, never counted toward `--n-trials`, never pruned. `tuner export` then decides on the
confirmation rounds alone, paired round by round with the baseline (`tuner.results.decision`).

The guard always has its floor: the baseline's round-0 run is its second start, which the
correctness probe needs to tell a changed output from restart noise. Every study with a
candidate gets it, with `--confirm 0` too (then it is the only run). It runs first, so the
candidates the probe flags are known before the slots are given out: confirmation skips them
and takes the next candidate by the pooled ranking.

Nothing measured disappears: a candidate's failed confirmation start stays failed and counts
against it (`tuner export` does not export it and says which start failed); a failed baseline
run leaves its round unpaired, so it is run again (up to `BASELINE_ATTEMPTS` starts a round),
by this stage and by a later `tuner confirm`.

Several drivers, one study: every `tuner optimize` driver of a shared study reaches this stage,
and the stage runs once for the study, not once per driver. A driver queues the runs a round
lacks under the study's storage lock (`tuner.storage.locks.study_lock`), so two drivers never
queue the same (config, round); both drivers' workers take runs from the one queue; a driver
that finds another's run of the rounds in progress waits for it instead of running it again,
and meanwhile recovers a dead driver's runs as resume does for trials
(`tuner.study.search.resume.recover`: failed as interrupted, re-queued, run here). Each look
reads the rounds it is about (a round begun by a quicker driver does not count), once every
run of them is finished, so every driver takes the same decisions on the same runs, stops
after the same round and records the same verdicts and stop, whichever finishes last.

Lifecycle of `confirm_study`:

1. Load the study and its preset; store the between-run noise the verdicts use.
2. Run the floor start (the baseline's round 0) unless it ran (or wait for the driver running
   it).
3. Judge the probe; rank the unflagged, completed, feasible candidates by their chance of being
   best on the pooled evidence of every run (`rank_finalists`, `tuner.metrics.pooled`): a
   config's one lucky run no longer decides alone.
4. Queue the runs of the first `first_look` rounds a previous (or interrupted) confirmation has
   not finished: a resumed study confirms without repeating or losing runs; run the queue
   (`tuner.study.search.driver.run_waiting`); queue a failed baseline round again and run it;
   wait for other drivers' runs until no run is queued or running. Look at the verdict on
   those rounds (`tuner.results.export.confirmation_look`): stop when a config wins at the
   look's level, when no config can still gain 5% (futility), or at the cap; else one more
   round, without the configs that are futile (dropped: their verdicts stand on the rounds
   they ran; a resumed or second driver finds the same drops by looking again).
   The plan and the stop (rounds, reason) are stored on the study for the export.
5. Judge every config and write the verdicts, the workload mode and its meaning as study user
   attributes, which optuna-dashboard shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import StudyAttr
from tuner.errors import StudyError
from tuner.study.stages.confirm_budget import (
    _budget_plan,
    _BudgetStop,
    _floor_fits,
    _left,
    fixed_power_line,
    measured_noise,
    queue_next_rounds,
)
from tuner.study.stages.confirm_finalists import (
    _baseline,
    _has_candidate,
    finalists_line,
    rank_finalists,
)
from tuner.study.stages.confirm_looks import _dropped_before, _look, run_looks
from tuner.study.stages.confirm_plan import DEFAULT_CONFIRM, ConfirmPlan, stage_plan
from tuner.study.stages.confirm_rounds import (
    _open_runs,
    _rounds_begun,
    queue_rounds_locked,
)
from tuner.study.stages.confirm_settle import _settle, end_stage
from tuner.study.stages.confirm_verdicts import flagged_configs, record_verdicts, store_noise

if TYPE_CHECKING:
    from tuner.results.export_rule import Look

__all__ = ["ConfirmSummary", "confirm_study", "floor_start_needed"]


@dataclass(frozen=True)
class ConfirmSummary:
    """What the stage queued and what it concluded."""

    configs: tuple[int, ...]  # trial numbers confirmed, the baseline first
    queued: int
    verdicts: dict[str, dict[str, Any]]
    stopped: tuple[int, str] | None = None  # rounds run and why the stage stopped


def floor_start_needed(preset: Any) -> bool:
    """Whether `--confirm 0` still runs the floor start (the baseline's second start).

    It exists for the correctness probe, which compares greedy outputs with the baseline's;
    a model with dummy weights repeats one token whatever the config, so it has nothing to
    compare and the start would only cost a server run (minutes on a GPU).
    """
    return bool(preset.model.load_format != "dummy")


def confirm_study(
    options: Any,
    plan: ConfirmPlan = DEFAULT_CONFIRM,
    say: Callable[[str], None] = lambda line: None,
) -> ConfirmSummary:
    """Run (or finish) the confirmation stage of a study and record its verdicts.

    With `plan` off (`--confirm 0`) it still runs the floor start (the baseline's second
    start) when the study has a candidate, so the correctness probe has its floor.

    Args:
        options: `tuner.study.OptimizeOptions` naming the storage, study and cache.
        plan: How many candidates and rounds (the cap).
        say: Gets a progress line after each look: how many rounds ran, and whether and why
            the stage stops.

    With a budget (`options.budget`, `tuner optimize --budget`), `plan` is a cap: the stage
    runs the finalists and rounds the time left buys (`Budget.confirm_plan`), queues no run
    that cannot finish inside the budget, and stops with the reason "the budget".

    Raises:
        StudyError: no such study, or no feasible baseline to confirm against.
    """
    from tuner.storage import normalize_url
    from tuner.storage.locks import study_lock
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
    noise = store_noise(study, preset)
    # The pooled ranking's floor for one start's noise: the verdicts' paired sd over sqrt(2).
    start_sd = noise.log_sd / math.sqrt(2)

    def run_queue() -> optuna.Study:
        if study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            run_waiting(preset, options)
        return optuna.load_study(study_name=options.study_name, storage=url)

    def settle() -> optuna.Study:
        return _settle(url, options.study_name, run_queue, say)

    def queue(configs: list[FrozenTrial], rounds: int) -> int:
        return queue_rounds_locked(url, study, configs, rounds)

    trials = study.get_trials(deepcopy=False)
    base = _baseline(trials)
    if base is None and plan.enabled:
        raise StudyError(
            f"study {study.study_name!r} has no completed baseline to confirm against; "
            "run `tuner optimize` first"
        )
    # Until the verdicts are stored: a `tuner optimize` stopped in this stage resumes it next.
    study.set_user_attr(StudyAttr.CONFIRM_PENDING, True)
    queued = 0
    configs: list[FrozenTrial] = []
    stopped: tuple[int, str] | None = None
    budget = getattr(options, "budget", None)
    if not plan.enabled and not floor_start_needed(preset):
        say(
            "no confirmation and no correctness floor: dummy weights repeat one token, so a "
            "second baseline start has no output to compare"
        )
    elif base is not None and _has_candidate(trials, base) and not _floor_fits(budget, study, base):
        say(
            f"confirmation: none; the budget's {_left(budget)} left cannot fit the floor start "
            "(the baseline's second start): the export is unconfirmed"
        )
    elif base is not None and _has_candidate(trials, base):
        # The floor start first: the probe's verdicts decide which candidates get the slots.
        queued += queue([base], 1)
        study = settle()
        skip = flagged_configs(options.storage_url, study.study_name)
        trials = study.get_trials(deepcopy=False)
        # The pooled fit once: it gives both the finalists (`plan_confirmation`'s) and the
        # line that names them.
        ranked = rank_finalists(trials, skip=skip, noise_sd=start_sd)
        fresh = _baseline(trials)
        if budget is not None and plan.enabled:
            noise_now = measured_noise(options.storage_url, study.study_name)
            plan = _budget_plan(budget, plan, say, noise_now)
            lines = getattr(options, "progress", None)
            if lines is not None:  # the ETA's cap: the rounds the budget's time left buys
                lines.confirm_cap = plan.rounds or None
                lines.later_runs = (plan.k + 1) * plan.rounds - 1 if plan.enabled else 0
        # The plan is read and stored under the lock: two drivers that arrive together with
        # different caps run the stage with the first one's.
        with study_lock(url, options.study_name, "confirm"):
            plan, note = stage_plan(study, plan)
            configs = [fresh, *(t for t, _ in ranked[: plan.k])] if fresh is not None else []
            # The baseline alone has nothing to be paired with: re-running it would cost
            # server starts and decide nothing (a study of --n-trials 1, or one whose
            # candidates all failed or were flagged).
            staged = plan.enabled and len(configs) > 1
            if staged:
                study.set_user_attr(StudyAttr.CONFIRM_PLAN, plan.looks())
        if note:
            say(note)
        if staged:
            say(finalists_line(ranked, plan.k))
            if budget is None:  # under a budget, `_budget_plan` said the power it buys
                noise_now = measured_noise(options.storage_url, study.study_name)
                say(fixed_power_line(len(configs) - 1, plan.rounds, noise_now))
            # A resumed (or extended) stage first completes the rounds already begun.
            rounds = max(plan.first_look, min(_rounds_begun(study, configs), plan.rounds))
            # Configs an earlier look dropped (futile): the same looks again, on the same runs.
            dropped = _dropped_before(options, study.study_name, rounds, plan)

            counted = 0  # runs queued, also when a budget stop ends the rounds

            def run_rounds(live: list[FrozenTrial], rounds: int) -> int:
                # Until every run of the rounds is finished, by whichever driver: a later pass
                # re-runs a baseline round that failed in an earlier one (here or elsewhere).
                nonlocal study, counted
                n = 0
                while True:
                    more, upto = queue_next_rounds(budget, study, live, rounds, queue)
                    n += more
                    counted += more
                    if not more and not _open_runs(study.get_trials(deepcopy=False)):
                        if upto >= rounds:
                            return n
                        continue
                    study = settle()

            def look(rounds: int) -> Look:
                return _look(options, study.study_name, rounds, plan)

            try:
                _, stopped = run_looks(configs, rounds, dropped, run_rounds, look, say)
            except _BudgetStop as short:
                done = short.rounds
                say(
                    f"confirmation: stopped after {done} round{'s' if done != 1 else ''}: "
                    f"{short.reason}"
                )
                stopped = (done, short.reason)
            queued += counted
    verdicts = record_verdicts(study, options.storage_url)
    if stopped is not None:
        study.set_user_attr(StudyAttr.CONFIRM_STOP, {"rounds": stopped[0], "reason": stopped[1]})
    end_stage(url, study)
    return ConfirmSummary(tuple(t.number for t in configs), queued, verdicts, stopped)
