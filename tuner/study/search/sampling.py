"""What to try next: TPE over a view of the search's own trials, never a repeat.

The sampler never runs on the stored study itself. For each new candidate, `propose()` copies
the sampled trials (roles `baseline` and `candidate`, see `tuner.study.search.roles`) that are
complete, pruned or running into an in-memory study, asks a fresh TPE sampler there, and
returns params; the driver enqueues them on the real study and runs them. Hence:

- controls and confirmations (extra roles) never reach the sampler, whatever params or value
  they carry;
- a duplicate never becomes a trial: a suggestion that repeats a measured, running or queued
  config is dropped in the view and TPE is asked again (with another seed), then a uniform draw
  among the configs not yet measured; only when none is left does `propose()` return None;
- the sampler's seed is derived from the study seed and the number of sampled trials already
  there, so a resumed study continues the sequence instead of replaying it, and the same
  history always gives the same next candidate;
- once the search has re-run its baseline (`Role.BASELINE_RERUN`), the view's values are
  drift-corrected (`drift_corrected_values`): a trial's tasks/h over the baseline's rate at its
  place in the run order (`tuner.metrics.drift.baseline_at`), in the first baseline start's
  tasks/h, so TPE does not learn the machine's drift as a config's merit.
"""

from __future__ import annotations

import copy
import hashlib
import random
import warnings
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.attrs import Role, TrialAttr, is_feasible
from tuner.metrics.drift import baseline_at
from tuner.study.search.roles import counts_toward_budget, is_sampled, role_of
from tuner.study.space import ConfigKey, config_key

if TYPE_CHECKING:
    from tuner.study.space import Preset

__all__ = [
    "SamplerFactory",
    "derive_seed",
    "drift_corrected_values",
    "enumerate_space",
    "make_sampler",
    "propose",
    "startup_trials",
    "taken_configs",
]

SamplerFactory = Callable[[int | None, int], optuna.samplers.BaseSampler]

# TPE gets this many tries (each with its own derived seed) before the uniform fallback; by
# then the search has converged on measured configs and a fresh one teaches it more.
TPE_ATTEMPTS = 8


# TPE's random start-up draws: a third of the budget, at least 3 and at most 5. The cap was 10
# until the replay judged it on the export's regret against the re-recorded truth
# (docs/decisions.md, "TPE's start-ups capped at 5"): at most 5 random draws lowered the shipped
# study's mean regret at a quarter of the grid's cost by 0.5 points (95% -0.9 to -0.1).
STARTUP_MIN, STARTUP_MAX = 3, 5


def startup_trials(n_trials: int) -> int:
    """How many of a run's `n_trials` TPE draws at random before its model guides it."""
    return max(STARTUP_MIN, min(STARTUP_MAX, n_trials // 3))


def make_sampler(seed: int | None, n_trials: int) -> optuna.samplers.BaseSampler:
    """TPE over the conditional space; it learns feasibility from each trial's constraint.

    Infeasible configs (the server cannot start on this card) set a positive constraint with
    `Trial.set_constraint` (Optuna 5), which TPE reads without a constraints function.
    `constant_liar` keeps parallel slots from drawing the same point while one runs.

    Args:
        seed: The derived seed of this draw (see `derive_seed`).
        n_trials: The run's trial budget; a third of it (3 to 5) is random start-up draws
            (`startup_trials`).
    """
    with warnings.catch_warnings():
        # `multivariate` and `group` are marked experimental; tuner relies on them knowingly.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            multivariate=True,
            group=True,  # the space is conditional: depth and lookup exist only for some methods
            seed=seed,
            n_startup_trials=startup_trials(n_trials),
            constant_liar=True,
        )


def derive_seed(seed: int | None, n_sampled: int, attempt: int) -> int | None:
    """The seed of one draw: the study seed, the sampled trials already there, the attempt."""
    if seed is None:
        return None
    digest = hashlib.sha256(f"{seed}:{n_sampled}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def taken_configs(trials: Iterable[FrozenTrial]) -> set[ConfigKey]:
    """Configs of sampled trials that are measured, running or queued (repeats are duplicates).

    Interrupted trials and first worker crashes are not measurements: their re-queued copy is
    WAITING (taken), and without one the config may be drawn again.
    """
    out: set[ConfigKey] = set()
    for t in trials:
        # An A/A copy of the baseline (`--also-try baseline`) repeats it on purpose.
        if not is_sampled(t) or TrialAttr.COPY_OF in t.user_attrs:
            continue
        live = t.state in (TrialState.RUNNING, TrialState.WAITING)
        if live or counts_toward_budget(t):
            out.add(config_key(dict(t.params) or _fixed_params(t)))
    return out


def drift_corrected_values(trials: Iterable[FrozenTrial]) -> dict[int, float]:
    """Complete sampled trials' values corrected for the machine's drift, by trial number.

    A value becomes value x first / b, where b is the baseline's tasks/h at the trial's place
    in the run order (the order of server starts) interpolated between its starts (`baseline_at`)
    and `first` the first baseline start's: a ratio to the drift-corrected baseline, in the
    first start's tasks/h. Empty until the baseline has been re-run during the search (before,
    there is nothing to interpolate: the values stand as measured).
    """
    started = sorted(
        (t for t in trials if t.datetime_start is not None),
        key=lambda t: (t.datetime_start, t.number),
    )
    place = {t.number: float(i) for i, t in enumerate(started)}
    bases = [
        (place[t.number], float(t.value))
        for t in started
        if role_of(t) in (Role.BASELINE, Role.BASELINE_RERUN)
        and is_feasible(t)
        and t.value is not None
        and t.value > 0
    ]
    if not any(role_of(t) == Role.BASELINE_RERUN for t in started) or len(bases) < 2:
        return {}
    first = min(bases)[1]
    return {
        t.number: float(t.value) * first / baseline_at(place[t.number], bases).tasks_per_hour
        for t in started
        if is_sampled(t) and t.state == TrialState.COMPLETE and t.value is not None
    }


def _fixed_params(t: FrozenTrial) -> dict[str, Any]:
    # A WAITING trial queued with `enqueue_trial` keeps its params in this system attribute.
    fixed = t.system_attrs.get("fixed_params")
    return dict(fixed) if isinstance(fixed, dict) else {}


class _Enumerator:
    """A stand-in for `optuna.Trial` that walks one branch of the space per `Preset.suggest`."""

    def __init__(self, path: list[int]) -> None:
        self.path, self._i = path, 0
        self.sizes: list[int] = []

    def _pick(self, choices: list[Any]) -> Any:
        if self._i == len(self.path):
            self.path.append(0)
        self.sizes.append(len(choices))
        value = choices[self.path[self._i]]
        self._i += 1
        return value

    def suggest_categorical(self, _name: str, choices: list[Any]) -> Any:
        return self._pick(list(choices))

    def suggest_int(self, _name: str, low: int, high: int, step: int = 1) -> int:
        return int(self._pick(list(range(low, high + 1, step))))

    def suggest_float(
        self, _name: str, low: float, high: float, step: float | None = None
    ) -> float:
        if step is None:
            raise _Continuous()
        n = round((high - low) / step)
        return float(self._pick([low + i * step for i in range(n + 1)]))


class _Continuous(Exception):
    pass


def enumerate_space(preset: Preset, limit: int = 100_000) -> list[dict[str, Any]] | None:
    """Every distinct config of the preset's space, or None when it is continuous or huge."""
    configs: list[dict[str, Any]] = []
    path: list[int] = []
    while True:
        walker = _Enumerator(path)
        try:
            configs.append(preset.suggest(cast(optuna.Trial, walker)))
        except _Continuous:
            return None
        if len(configs) > limit:
            return None
        # Next branch: bump the deepest choice that has room, drop everything below it.
        path = walker.path[: len(walker.sizes)]
        while path and path[-1] + 1 >= walker.sizes[len(path) - 1]:
            path.pop()
        if not path:
            return configs
        path[-1] += 1


def _with_value(t: FrozenTrial, value: float | None) -> FrozenTrial:
    if value is None:
        return t
    out = copy.copy(t)
    out.value = value
    return out


def propose(
    trials: list[FrozenTrial],
    preset: Preset,
    *,
    seed: int | None,
    n_trials: int,
    configs: list[dict[str, Any]] | None,
    sampler_factory: SamplerFactory = make_sampler,
) -> dict[str, Any] | None:
    """Params of the next candidate, never a repeat; None when every config is taken.

    Args:
        trials: All trials of the study (any role, any state).
        preset: Its search space.
        seed: The study seed (None: not reproducible).
        n_trials: The run's budget (TPE's start-up share depends on it).
        configs: `enumerate_space(preset)`, or None for a continuous space.
        sampler_factory: Builds the sampler from (derived seed, n_trials).
    """
    taken = taken_configs(trials)
    if configs is not None and all(config_key(c) in taken for c in configs):
        return None
    visible = [
        t
        for t in trials
        if is_sampled(t) and t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
    ]
    n_sampled = sum(1 for t in trials if is_sampled(t))
    corrected = drift_corrected_values(trials)
    if corrected:
        visible = [_with_value(t, corrected.get(t.number)) for t in visible]
    view = optuna.create_study(direction="maximize")
    view.add_trials(visible)
    for attempt in range(TPE_ATTEMPTS):
        view.sampler = sampler_factory(derive_seed(seed, n_sampled, attempt), n_trials)
        trial = view.ask()
        params = preset.suggest(trial)
        # The view is thrown away; FAIL keeps the draw out of the next attempt's model.
        view.tell(trial, state=TrialState.FAIL)
        if config_key(params) not in taken:
            return params
    if configs is not None:
        free = [c for c in configs if config_key(c) not in taken]
        return random.Random(derive_seed(seed, n_sampled, -1)).choice(free)
    # A continuous space: uniform draws almost never repeat.
    rng_seed = derive_seed(seed, n_sampled, -1)
    view.sampler = optuna.samplers.RandomSampler(seed=rng_seed)
    for _ in range(100):
        params = preset.suggest(view.ask())
        if config_key(params) not in taken:
            return params
    return None
