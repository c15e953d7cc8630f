"""The replay half of `sample_efficiency.py`: one seeded search and its export.

The searches compared (`Search`): `tuner optimize` as shipped, with the preset's screening and
confirmation (`DEFAULT`), and random search with the same screening and confirmation
(`RANDOM_DEFAULT`). A search runs tuner's own loop (`tuner.study.search.loop.StudyLoop`) on the
simulated-clock backend over the recorded grid (`_grid_replay.GridReplayBackend`, `new_study`)
under the product's `--budget` plan and guard (`_se_budget.budgeted_search`); its answer is
what `tuner export` would pick (`tuner.results.export.choose_export`, `_exported`).
`world_table` moves the grid to one posterior draw of the truth (`grid_truth.py`); `_se_budget`
runs the stage after the search.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from benchmarks._grid_replay import GridReplayBackend, GridTable
from tuner.attrs import TrialAttr
from tuner.errors import StudyError
from tuner.results import decision
from tuner.results.export import choose_export
from tuner.results.rows import StudyResults, TrialRow
from tuner.study.search.driver import request_factory
from tuner.study.search.pruning import PruneRule, ScreenRule
from tuner.study.search.sampling import SamplerFactory, make_sampler
from tuner.study.space import config_key, load_preset
from tuner.study.stages.confirm_plan import ConfirmPlan


@dataclass(frozen=True)
class Search:
    """One way of searching: a sampler and a prune rule."""

    name: str
    sampler: SamplerFactory
    prune: PruneRule


def _random(seed: int | None, _n: int) -> optuna.samplers.BaseSampler:
    return optuna.samplers.RandomSampler(seed=seed)


def _default_search() -> Search:
    """`tuner optimize --model smollm2-135m --gpu cpu` as shipped: the preset's screening and
    its confirmation stage (`ConfirmPlan.for_preset`), named after them."""
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    plan = ConfirmPlan.for_preset(preset)
    prune = PruneRule(screening=ScreenRule()) if preset.screening else PruneRule()
    words = ("screening, " if preset.screening else "") + f"confirm {plan.k},{plan.rounds}"
    return Search(f"tuner optimize ({words})", make_sampler, prune)


DEFAULT = _default_search()
# The same screening and confirmation after random search: what the shipped study's search is
# worth against random search's at the same export rule.
_WORDS = DEFAULT.name.split("(")[1].rstrip(")").replace(", ", " + ")
RANDOM_DEFAULT = Search(f"random + {_WORDS}", _random, DEFAULT.prune)


def _row(trial: optuna.trial.FrozenTrial, sim_result: Any) -> TrialRow:
    """The trial as `tuner export` reads it (no storage: the replayed result's fields)."""
    from tuner.metrics import RunOutcomes

    w = sim_result.workload if sim_result is not None else None
    states = {"COMPLETE": "complete", "PRUNED": "pruned", "FAIL": "fail"}
    return TrialRow(
        number=trial.number,
        state=states.get(trial.state.name, trial.state.name.lower()),
        role=str(trial.user_attrs.get(TrialAttr.ROLE, "candidate")),
        params=dict(trial.params),
        value=trial.value,
        confirm_of=trial.user_attrs.get(TrialAttr.CONFIRM_OF),
        confirm_round=trial.user_attrs.get(TrialAttr.CONFIRM_ROUND),
        infeasible=bool(trial.user_attrs.get(TrialAttr.INFEASIBLE)),
        tasks=w.tasks if w else None,
        successes=w.successes if w else None,
        tasks_per_hour=w.tasks_per_hour if w else None,
        tasks_per_hour_low=w.tasks_per_hour_low if w else None,
        tasks_per_hour_high=w.tasks_per_hour_high if w else None,
        outcomes=RunOutcomes.of(w.task_records, w.scored_wall_s) if w else None,
        success_rate=w.success_rate if w else None,
        mode=w.mode if w else None,
    )


class _Recorder(GridReplayBackend):
    """The backend, keeping each result for the export rule."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.results: dict[int, Any] = {}

    def _finish(self, number: int) -> Any:
        finished = super()._finish(number)
        self.results[number] = finished.result
        return finished


def _memoized_paired_ratio() -> None:
    """`paired_ratio` is a pure function of its runs and noise; answer repeats from a cache.

    A study asks the export rule at three budgets, each judging every config against the
    baseline again: the cache makes that one computation per pair.
    """
    original = decision.paired_ratio

    @functools.lru_cache(maxsize=4096)
    def cached(candidate: tuple[Any, ...], baseline: tuple[Any, ...], kw: tuple[Any, ...]) -> Any:
        return original(candidate, baseline, **dict(kw))

    def paired_ratio(candidate: Any, baseline: Any, **kw: Any) -> Any:
        return cached(tuple(candidate), tuple(baseline), tuple(sorted(kw.items())))

    decision.paired_ratio = paired_ratio


def new_study(table: GridTable, seed: int) -> tuple[optuna.Study, _Recorder]:
    """A seeded study in memory and its backend over `table` (the seed's noise and drift);
    `_se_budget.budgeted_search` runs the loop on them."""
    study = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed),  # unused: the loop asks search.sampler
    )
    return study, _Recorder(table, 1, random.Random(seed * 7919 + 1), _drift(seed))


def _request_factory(preset: Any) -> Any:
    # The driver's own request factory: the preset's server spec, workload and plain benchmark.
    return request_factory(preset, model_path="recorded", cache_dir=Path("."))


def study_results(
    table: GridTable,
    trials: dict[int, optuna.trial.FrozenTrial],
    results: dict[int, Any],
    numbers: list[int],
) -> StudyResults:
    """The trials `numbers` as `tuner export` reads a study (no storage: the replayed results)."""
    rows = tuple(_row(trials[n], results.get(n)) for n in sorted(numbers) if n in trials)
    return StudyResults(
        study_name="replay", storage="memory", model=None, gpu=None, trials=rows,
        mode=table.preset.workload.mode,
    )  # fmt: skip


def _exported(
    table: GridTable,
    trials: dict[int, optuna.trial.FrozenTrial],
    results: dict[int, Any],
    done: list[int],
) -> tuple[bool, str | None]:
    """What `tuner export` would pick from the trials `done`: (it is the baseline, its config
    key; None when nothing is exported)."""
    try:
        choice = choose_export(study_results(table, trials, results, done))
    except StudyError:
        return False, None
    is_base = choice.baseline is not None and choice.trial.number == choice.baseline.number
    key = config_key(dict(choice.trial.params))
    return is_base, key


# ---- many studies ---------------------------------------------------------------------------

_DRIFTS: list[float] = []  # measured noise: the fitted sittings' drifts, log tasks/h an hour


def _drift(seed: int) -> float:
    """A study's drift: one of the fitted sittings' (either sign), chosen by the seed."""
    if not _DRIFTS:
        return 0.0
    rng = random.Random(seed * 104729 + 17)
    return rng.choice(_DRIFTS) * rng.choice((-1.0, 1.0))


def world_table(table: GridTable, mus: dict[str, float]) -> GridTable:
    """The grid with each config's mean tasks/h moved to exp(mu) (one posterior draw of the
    truth): its tasks' recorded log durations shift alike, so the replayed noise, the task mix
    and the schedule's shape stay the recording's, and only the config's level is the draw's."""
    import copy
    import dataclasses
    import math

    out = copy.copy(table)
    configs = {}
    for key, c in table.configs.items():
        if not c.ok or key not in mus:
            configs[key] = c
            continue
        wins = sum(map(sum, c.successes)) / len(c.successes)
        nominal = wins * 3600.0 / table._nominal_window(c)
        shift = math.log(nominal) - mus[key]  # log duration factor: slower when mu is lower
        configs[key] = dataclasses.replace(
            c, log_mean=tuple(x + shift for x in c.log_mean), tasks_per_hour=math.exp(mus[key])
        )
    out.configs = configs
    return out
