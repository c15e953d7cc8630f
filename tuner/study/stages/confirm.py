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

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr, is_feasible, is_infeasible, role_from
from tuner.defaults import CONFIRM_K, CONFIRM_ROUNDS
from tuner.errors import ConfigError, StudyError

if TYPE_CHECKING:
    from tuner.metrics import BetweenRunNoise
    from tuner.metrics.pooled import PooledConfig
    from tuner.results.export_rule import Look
    from tuner.results.rows import StudyResults
    from tuner.study.space import Preset

T = TypeVar("T")

__all__ = [
    "BASELINE_ATTEMPTS",
    "DEFAULT_CONFIRM",
    "ConfirmPlan",
    "ConfirmSummary",
    "confirm_study",
    "finalists_line",
    "floor_start_needed",
    "parse_confirm",
    "plan_confirmation",
    "queue_rounds_locked",
    "rank_finalists",
    "record_verdicts",
    "round_order",
    "run_looks",
    "stage_plan",
]


@dataclass(frozen=True)
class ConfirmPlan:
    """Top `k` candidates and the baseline, up to `rounds` more runs each (k = 0: no
    confirmation). Rounds are sequential: the verdict is first looked at after `first_look`
    rounds and after each round after it, and the stage stops as soon as it is decided
    (`tuner.results.export_rule.next_look`); `rounds` is the cap."""

    k: int = CONFIRM_K
    rounds: int = CONFIRM_ROUNDS

    @property
    def enabled(self) -> bool:
        """False when the stage is switched off (`--confirm 0`)."""
        return self.k > 0 and self.rounds > 0

    @property
    def first_look(self) -> int:
        """Rounds before the verdict is first looked at; `rounds` is the cap."""
        from tuner.results.export_rule import FIRST_LOOK

        return min(FIRST_LOOK, self.rounds)

    def looks(self) -> dict[str, int]:
        """As stored on the study (`tuner.attrs.StudyAttr.CONFIRM_PLAN`)."""
        return {"k": self.k, "first": self.first_look, "max": self.rounds}

    @classmethod
    def for_preset(cls, preset: Preset) -> ConfirmPlan:
        """The preset's `confirm`, else the default: the top 2 candidates, up to 10 rounds.

        The decision simulation (benchmarks/decision_sim.py, docs/decision-sim.md) drew studies
        from the noise fitted to every recorded run: at the paired CV of 7.3% of a fresh shared
        box one candidate confirmed in 3 fixed rounds found a true +10% in about 4 studies of
        10, and no cap with one candidate reached 8; the runner-up's slot (the search often
        ranks the real gain second) and sequential rounds up to 10 did, and a decided verdict
        stops early. GPU presets use the same plan; their verdicts use the noise measured on
        H200s (the presets' `between_run`), not the CPU prior.
        """
        if preset.confirm is not None:
            return cls(preset.confirm.top_k, preset.confirm.rounds)
        return cls(CONFIRM_K, CONFIRM_ROUNDS)


DEFAULT_CONFIRM: Final = ConfirmPlan()


def parse_confirm(text: str) -> ConfirmPlan:
    """`K,MAX` (or `0` for off) from the command line: the top K candidates, up to MAX rounds
    (rounds stop early once the verdict is decided; `K,R` as before names the same stage).

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
            f"--confirm {text!r}: give K,R (top K candidates, up to R rounds each, stopping "
            "once the verdict is decided), e.g. 2,10, or 0 to skip confirmation"
        )
    return ConfirmPlan(numbers[0], numbers[1])


@dataclass(frozen=True)
class ConfirmSummary:
    """What the stage queued and what it concluded."""

    configs: tuple[int, ...]  # trial numbers confirmed, the baseline first
    queued: int
    verdicts: dict[str, dict[str, Any]]
    stopped: tuple[int, str] | None = None  # rounds run and why the stage stopped


def _role(t: FrozenTrial) -> str:
    return role_from(t.user_attrs, t.number)


def _baseline(trials: list[FrozenTrial]) -> FrozenTrial | None:
    return next((t for t in trials if _role(t) == Role.BASELINE and is_feasible(t)), None)


def _candidates(trials: list[FrozenTrial], base: FrozenTrial) -> list[FrozenTrial]:
    """Feasible candidates that are not the baseline's server (a copy of it counts)."""
    return [
        t
        for t in trials
        if _role(t) == Role.CANDIDATE
        and is_feasible(t)
        and (t.params != base.params or TrialAttr.COPY_OF in t.user_attrs)
    ]


def _pooled_params(t: FrozenTrial) -> dict[str, Any]:
    # A copy of the baseline (an A/A control) is a config of its own for the ranking.
    copy = t.user_attrs.get(TrialAttr.COPY_OF)
    return {**t.params, "copy_of": copy} if copy is not None else dict(t.params)


def rank_finalists(
    trials: list[FrozenTrial],
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    noise_sd: float | None = None,
) -> list[tuple[FrozenTrial, PooledConfig]]:
    """The feasible candidates' configs, most likely best first, from every run of the study.

    Each config is ranked by the pooled model (`tuner.metrics.pooled`) fitted to the log
    search-time value of every feasible run, every start of the baseline included (as
    measured: a drift correction would make the baseline's starts agree by construction): its
    probability of being the best candidate, then its posterior mean. One trial stands for
    each config (its highest run). Trials in `skip` (configs the correctness probe flagged)
    are not ranked.

    Args:
        trials: The study's trials.
        skip: Trial numbers not to rank.
        noise_sd: The sd of one start's log tasks/h (None: the default prior's, per start);
            the fit may find more, never less.
    """
    from tuner.metrics import DEFAULT_NOISE
    from tuner.metrics.pooled import fit_pooled, pooled_key

    base = _baseline(trials)
    if base is None:
        return []
    candidates = [t for t in _candidates(trials, base) if (t.value or 0.0) > 0]
    if not candidates:
        return []
    # Every start of the baseline's config (trial 0, its re-runs during the search, the floor):
    # their spread is the study's own evidence of the between-start noise.
    starts = (Role.BASELINE, Role.BASELINE_RERUN, Role.CONFIRM)
    numbers = {t.number for t in candidates}
    runs = [
        (_pooled_params(t), float(t.value or 0.0))
        for t in trials
        if (
            t.number in numbers
            or (
                _role(t) in starts
                and t.params == base.params
                and TrialAttr.COPY_OF not in t.user_attrs
            )
        )
        and is_feasible(t)
        and (t.value or 0.0) > 0
    ]
    sd = noise_sd if noise_sd is not None else DEFAULT_NOISE.log_sd / math.sqrt(2)
    fit = fit_pooled(runs, baseline=dict(base.params), noise_sd=sd).by_key()
    # One trial per config: its highest run (a repeated params set is the same server).
    chosen: dict[str, FrozenTrial] = {}
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.number not in skip:
            chosen.setdefault(pooled_key(_pooled_params(t)), t)
    ranked = [(t, fit[key]) for key, t in chosen.items()]
    ranked.sort(key=lambda pair: (-pair[1].p_best, -pair[1].mean, pair[0].number))
    return ranked


def plan_confirmation(
    trials: list[FrozenTrial],
    k: int,
    *,
    skip: frozenset[int] | set[int] = frozenset(),
    noise_sd: float | None = None,
    rank: Literal["pooled", "raw"] = "pooled",
) -> list[FrozenTrial]:
    """The baseline, then the `k` candidates most likely to be best on the pooled evidence of
    every run (`rank_finalists`), best first, leaving out the trials in `skip` (configs the
    correctness probe flagged). `rank="raw"`: the `k` highest search-time runs instead, the
    rule before the pooled model (benchmarks/sample_efficiency.py compares the two)."""
    base = _baseline(trials)
    if base is None:
        return []
    if rank == "raw":
        return [base, *_top_runs(trials, base, k, skip)]
    ranked = rank_finalists(trials, skip=skip, noise_sd=noise_sd)
    return [base, *(t for t, _ in ranked[:k])]


def _top_runs(
    trials: list[FrozenTrial], base: FrozenTrial, k: int, skip: frozenset[int] | set[int]
) -> list[FrozenTrial]:
    candidates = [t for t in _candidates(trials, base) if t.number not in skip]
    seen: list[dict[str, Any]] = []
    top: list[FrozenTrial] = []
    for t in sorted(candidates, key=lambda t: (-(t.value or 0.0), t.number)):
        if t.params not in seen:
            seen.append(t.params)
            top.append(t)
    return top[:k]


def finalists_line(ranked: Sequence[tuple[FrozenTrial, PooledConfig]], k: int) -> str:
    """One line: the finalists and their chances of being best, on the pooled evidence."""
    if not ranked:
        return "confirmation: no candidate to confirm"
    shown = ", ".join(
        f"#{t.number} (P(best) {c.p_best:.0%}, {c.tasks_per_hour:,.0f} tasks/h pooled over "
        f"{c.runs} run{'s' if c.runs != 1 else ''} of its own)"
        for t, c in ranked[:k]
    )
    return f"confirmation: finalists by the pooled evidence of every run: {shown}"


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


def round_order(configs: Sequence[T], round_: int) -> list[T]:
    """The order of one round's runs: as given in even rounds, reversed in odd ones (A B, B A,
    A B, ...).

    A machine that drifts (every recorded session did, up or down, by about 0.5% a run:
    benchmarks/data/noise-model.json) would otherwise favour whichever config runs second in
    every round; alternating cancels a linear drift over each pair of rounds.
    """
    return list(configs) if round_ % 2 == 0 else list(reversed(configs))


def missing_runs(
    study: optuna.Study, configs: list[FrozenTrial], rounds: int, *, first: int = 0
) -> list[tuple[FrozenTrial, int]]:
    """The (config, round) runs of rounds `first`..`rounds - 1` not done, running or queued,
    in the order `queue_rounds` queues them."""
    done = _already(study.get_trials(deepcopy=False))
    return [
        (t, round_)
        for round_ in range(first, rounds)
        for t in round_order(configs, round_)
        if (t.number, round_) not in done
    ]


def queue_rounds(
    study: optuna.Study, configs: list[FrozenTrial], rounds: int, *, first: int = 0
) -> int:
    """Queue the missing runs of rounds `first`..`rounds - 1`, round by round in
    `round_order` (A B C, C B A, ...); returns how many were queued."""
    missing = missing_runs(study, configs, rounds, first=first)
    for t, round_ in missing:
        attrs = {TrialAttr.CONFIRM_OF: t.number, TrialAttr.CONFIRM_ROUND: round_}
        _enqueue(study, dict(t.params), attrs)
    return len(missing)


def queue_rounds_locked(
    url: str, study: optuna.Study, configs: list[FrozenTrial], rounds: int
) -> int:
    """`queue_rounds` under the study's confirm lock (`tuner.storage.locks.study_lock`): two
    drivers that reach the same round at once read and queue one after the other, so the
    second finds the first's runs and queues none."""
    from tuner.storage.locks import study_lock

    with study_lock(url, study.study_name, "confirm"):
        return queue_rounds(study, configs, rounds)


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


def floor_start_needed(preset: Any) -> bool:
    """Whether `--confirm 0` still runs the floor start (the baseline's second start).

    It exists for the correctness probe, which compares greedy outputs with the baseline's;
    a model with dummy weights repeats one token whatever the config, so it has nothing to
    compare and the start would only cost a server run (minutes on a GPU).
    """
    return preset.model.load_format != "dummy"


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
            plan = _budget_plan(budget, plan, say)
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
                    upto = rounds if budget is None else _next_round(study, live, rounds)
                    short = _over_budget(budget, study, live, upto)
                    if short is not None:
                        raise _BudgetStop(upto - 1, short)
                    more = queue(live, upto)
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


def _left(budget: Any) -> str:
    from tuner.study.search.estimate import minutes

    return minutes(max(budget.left_s(), 0.0))


def _floor_fits(budget: Any, study: optuna.Study, base: FrozenTrial) -> bool:
    """Whether the floor start (when not run yet) fits the budget (no budget: it does)."""
    if budget is None:
        return True
    missing = missing_runs(study, [base], 1)
    return not missing or budget.fits(len(missing))


def _budget_plan(budget: Any, plan: ConfirmPlan, say: Callable[[str], None]) -> ConfirmPlan:
    """The finalists and rounds the budget's time left buys, `plan` being the cap."""
    k, rounds = budget.confirm_plan()
    run = budget.run_s()
    at = f" at about {run:.0f} s a run" if run is not None else ""
    if not k or not rounds:
        say(f"confirmation: no round fits the budget's {_left(budget)} left{at}")
        return ConfirmPlan(0, 0)
    planned = ConfirmPlan(min(k, plan.k), min(rounds, plan.rounds))
    say(
        f"confirmation: the budget's {_left(budget)} left{at} buys the top {planned.k} and the "
        f"baseline for up to {planned.rounds} round{'s' if planned.rounds != 1 else ''}"
    )
    return planned


def _next_round(study: optuna.Study, configs: list[FrozenTrial], rounds: int) -> int:
    """The rounds to have queued now under a budget: up to the first with a missing run (one
    round at a time, each checked against the time left), else all `rounds`."""
    missing = missing_runs(study, configs, rounds)
    return min((r for _, r in missing), default=rounds - 1) + 1


def _over_budget(
    budget: Any, study: optuna.Study, configs: list[FrozenTrial], rounds: int
) -> str | None:
    """Why the missing runs of the first `rounds` rounds cannot be queued (None: they fit, or
    there is no budget): the stop reason stored for the export."""
    if budget is None:
        return None
    need = len(missing_runs(study, configs, rounds))
    if not need or budget.fits(need):
        return None
    from tuner.study.search.estimate import minutes

    run = budget.run_s() or 0.0
    return (
        f"the budget: round {rounds} needs {need} run{'s' if need != 1 else ''} (about "
        f"{minutes(need * run)} at {run:.0f} s a run) and {_left(budget)} is left"
    )


class _BudgetStop(Exception):
    """A round the budget cannot pay for: the stage stops after `rounds` rounds."""

    def __init__(self, rounds: int, reason: str) -> None:
        super().__init__(reason)
        self.rounds = rounds
        self.reason = reason


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


def stage_plan(study: optuna.Study, plan: ConfirmPlan) -> tuple[ConfirmPlan, str | None]:
    """The plan this driver runs the stage with, and a line when it is not its own.

    A stage that is under way (its plan stored by the driver that began it, no stop recorded
    yet: another driver's, or an interrupted run of this command) keeps its plan, so every
    driver looks at the same rounds with the same cap and the export does not depend on which
    finishes last. A stage that has stopped may be extended with another plan (`tuner confirm
    --confirm K,R`)."""
    attrs = study.user_attrs  # one read of the storage
    stored = attrs.get(StudyAttr.CONFIRM_PLAN)
    if not plan.enabled or stored is None or StudyAttr.CONFIRM_STOP in attrs:
        return plan, None
    theirs = ConfirmPlan(int(stored["k"]), int(stored["max"]))
    if theirs == plan:
        return plan, None
    return theirs, (
        f"confirmation: this study's stage is under way with --confirm {theirs.k},{theirs.rounds} "
        f"(begun by another driver or an interrupted run), so this driver runs it with that, "
        f"not --confirm {plan.k},{plan.rounds}; once it has stopped, `tuner confirm --confirm "
        f"{plan.k},{plan.rounds}` extends it"
    )


def _rounds_begun(study: optuna.Study, configs: list[FrozenTrial]) -> int:
    """1 + the highest confirmation round any of `configs` has a run of (0: none)."""
    numbers = {t.number for t in configs}
    rounds = [
        int(t.user_attrs[TrialAttr.CONFIRM_ROUND])
        for t in study.get_trials(deepcopy=False)
        if _role(t) == Role.CONFIRM and t.user_attrs.get(TrialAttr.CONFIRM_OF) in numbers
    ]
    return max(rounds, default=-1) + 1


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


def _open_runs(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """Confirmation runs queued or running, by any driver."""
    return [
        t
        for t in trials
        if _role(t) == Role.CONFIRM and t.state in (TrialState.WAITING, TrialState.RUNNING)
    ]


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
