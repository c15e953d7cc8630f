"""The searches `sample_efficiency.py` compares: tuner's, random search, the grid in order,
`tuner optimize` as shipped (screening and confirmation) and random search with the same
screening and confirmation; `--screening` and `--variants` add more (`SEARCHES_ALL`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import optuna
from _grid_replay import SCREEN_RULES

from tuner.study.search.pruning import PruneRule
from tuner.study.search.sampling import SamplerFactory, make_sampler, startup_trials
from tuner.study.space import load_preset
from tuner.study.stages.confirm import ConfirmPlan

NEVER = PruneRule(min_completed=10**9)


@dataclass(frozen=True)
class Search:
    """One way of searching: a sampler (None: the grid in order) and a prune rule."""

    name: str
    sampler: SamplerFactory | None
    prune: PruneRule
    confirm: tuple[int, int] | None = None  # (top k, rounds): confirm as `tuner optimize` does
    # Finalists by the highest single runs, the rule before the pooled model (with confirm).
    raw_finalists: bool = False


def _random(seed: int | None, _n: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _default_search() -> Search:
    """`tuner optimize --model smollm2-135m --gpu cpu` as shipped: the preset's screening and
    its confirmation stage (`ConfirmPlan.for_preset`), named after them."""
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    plan = ConfirmPlan.for_preset(preset)
    prune = PruneRule(screening=SCREEN_RULES["shipped"]) if preset.screening else PruneRule()
    words = ("screening, " if preset.screening else "") + f"confirm {plan.k},{plan.rounds}"
    return Search(f"tuner optimize ({words})", make_sampler, prune, confirm=(plan.k, plan.rounds))


DEFAULT = _default_search()
RAW_FINALISTS = "[raw finalists]"
# The same screening and confirmation after random search: what the shipped study's search is
# worth against random search's at the same export rule (`tuner` and `random` export with
# `--confirm 0`: single runs, which rarely beat the baseline at the rule's level).
RANDOM_DEFAULT = Search(
    "random + " + DEFAULT.name.split("(")[1].rstrip(")").replace(", ", " + "),
    _random,
    DEFAULT.prune,
    DEFAULT.confirm,
)
SEARCHES = (
    Search("tuner", make_sampler, PruneRule()),
    Search("random", _random, PruneRule()),
    Search("grid in order", None, NEVER),
    # `tuner optimize` on the CPU preset as shipped (its screening and confirmation stage);
    # the budget is the search's, the cost printed is all of it.
    DEFAULT,
    RANDOM_DEFAULT,
)


@dataclass(frozen=True)
class Tpe:
    """A TPE setting to compare (`--variants`); None start-up trials: tuner's own rule."""

    startup: int | None = None
    multivariate: bool = True
    liar: bool = True

    def __call__(self, seed: int | None, n_trials: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            startup = self.startup if self.startup is not None else startup_trials(n_trials)
            return optuna.samplers.TPESampler(
                multivariate=self.multivariate,
                group=self.multivariate,
                seed=seed,
                n_startup_trials=startup,
                constant_liar=self.liar,
            )


@dataclass(frozen=True)
class Gp:
    """Optuna's Gaussian-process sampler (`--variants`)."""

    startup: int = 3

    def __call__(self, seed: int | None, _n: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.GPSampler(seed=seed, n_startup_trials=self.startup)


VARIANTS = (
    Search("TPE start-up 1", Tpe(1), PruneRule()),
    Search("TPE start-up 2", Tpe(2), PruneRule()),
    Search("TPE start-up 10", Tpe(10), PruneRule()),
    Search("TPE independent", Tpe(None, multivariate=False), PruneRule()),
    Search("TPE no liar", Tpe(None, liar=False), PruneRule()),
    Search("GP start-up 3", Gp(3), PruneRule()),
    Search("tuner, no pruning", make_sampler, NEVER),
    Search("tuner, prune from 1/6", make_sampler, PruneRule(warmup_fraction=1 / 6)),
    Search("tuner, prune from 1/2", make_sampler, PruneRule(warmup_fraction=1 / 2)),
    Search("tuner, prune after 2", make_sampler, PruneRule(min_completed=2)),
)


def _confirm_variants() -> list[Search]:
    """`tuner optimize`'s CPU default (screening on) under other confirmation settings."""
    assert DEFAULT.confirm is not None
    top, rounds = DEFAULT.confirm
    screen = PruneRule(screening=SCREEN_RULES["shipped"])
    return (
        [
            Search(f"tuner + screening + confirm {k},{r}", make_sampler, screen, confirm=(k, r))
            for k, r in ((1, 2), (2, 2), (1, 3))
        ]
        + [
            # The shipped study with another sampler (issue 36: choose the start-ups and the
            # sampler on the regret of the export, not on single runs).
            Search(f"{DEFAULT.name} {name}", sampler, DEFAULT.prune, DEFAULT.confirm)
            for name, sampler in (
                ("TPE start-up 3", Tpe(3)),
                ("TPE start-up 10 (the cap before)", Tpe(10)),
                ("GP start-up 3", Gp(3)),
            )
        ]
        + [
            # The shipped study without screening (issue 36: keep it only if it pays).
            Search(
                DEFAULT.name.replace("screening, ", "no screening, "),
                DEFAULT.sampler,
                PruneRule(),
                DEFAULT.confirm,
            )
        ]
        + [
            # The shipped study with one more finalist (issue 36: "the 2-3 best").
            Search(
                DEFAULT.name.replace(f"confirm {top},", f"confirm {top + 1},"),
                DEFAULT.sampler,
                DEFAULT.prune,
                (top + 1, rounds),
            )
        ]
        + [
            # The shipped study with its finalists picked by their highest single runs.
            Search(
                f"{DEFAULT.name} {RAW_FINALISTS}",
                DEFAULT.sampler,
                DEFAULT.prune,
                DEFAULT.confirm,
                raw_finalists=True,
            )
        ]
    )


SEARCHES_ALL: list[Search] = list(SEARCHES)


def _screening_searches(*, all_rules: bool) -> list[Search]:
    """tuner and random search with the shipped screening rule; `all_rules`: every rule."""
    shipped = SCREEN_RULES["shipped"]
    out = [
        Search("tuner + screening", make_sampler, PruneRule(screening=shipped)),
        Search("random + screening", _random, PruneRule(screening=shipped)),
    ]
    if all_rules:
        out += [
            Search(f"tuner + screening {name}", make_sampler, PruneRule(screening=rule))
            for name, rule in SCREEN_RULES.items()
            if name != "shipped"
        ]
    return out
