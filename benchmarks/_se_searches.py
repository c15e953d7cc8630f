"""The searches `sample_efficiency.py` compares: `tuner optimize` as shipped (screening and
confirmation) and random search with the same screening and confirmation. The other searches
and the sampler, pruner and confirmation variants once compared (`--variants`) are in
benchmarks/_se_searches.py at 95daa70; their tables stay in benchmarks/data/
(sample-efficiency-*.md: -variants-, -startup-, -confirm-, -pooled-)."""

from __future__ import annotations

from dataclasses import dataclass

import optuna

from tuner.study.search.pruning import PruneRule, ScreenRule
from tuner.study.search.sampling import SamplerFactory, make_sampler
from tuner.study.space import load_preset
from tuner.study.stages.confirm_plan import ConfirmPlan


@dataclass(frozen=True)
class Search:
    """One way of searching: a sampler and a prune rule."""

    name: str
    sampler: SamplerFactory
    prune: PruneRule
    confirm: tuple[int, int] | None = None  # (top k, rounds): confirm as `tuner optimize` does


def _random(seed: int | None, _n: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _default_search() -> Search:
    """`tuner optimize --model smollm2-135m --gpu cpu` as shipped: the preset's screening and
    its confirmation stage (`ConfirmPlan.for_preset`), named after them."""
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    plan = ConfirmPlan.for_preset(preset)
    prune = PruneRule(screening=ScreenRule()) if preset.screening else PruneRule()
    words = ("screening, " if preset.screening else "") + f"confirm {plan.k},{plan.rounds}"
    return Search(f"tuner optimize ({words})", make_sampler, prune, confirm=(plan.k, plan.rounds))


DEFAULT = _default_search()
# The same screening and confirmation after random search: what the shipped study's search is
# worth against random search's at the same export rule (`tuner` and `random` export with
# `--confirm 0`: single runs, which rarely beat the baseline at the rule's level).
RANDOM_DEFAULT = Search(
    "random + " + DEFAULT.name.split("(")[1].rstrip(")").replace(", ", " + "),
    _random,
    DEFAULT.prune,
    DEFAULT.confirm,
)
