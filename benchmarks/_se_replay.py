"""The replay half of `sample_efficiency.py`: one seeded study of a search (`_se_searches`).

A study runs tuner's own loop (`tuner.study.search.loop.StudyLoop`) on the simulated-clock
backend over the recorded grid (`_grid_replay_backend.GridReplayBackend`); at each budget its
answer is what `tuner export` would pick (`tuner.results.export.choose_export`) from the trials
finished by then. `StudyRun.exports` keeps those picks (config keys): the metric
(`_se_metric`) judges them against the grid's truth (`grid_truth.py`).
"""

from __future__ import annotations

import functools
import random
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from _grid_replay import GridTable
from _grid_replay_backend import GridReplayBackend
from _se_searches import SEARCHES_ALL, Search

from tuner.attrs import TrialAttr
from tuner.errors import StudyError
from tuner.results import decision
from tuner.results.export import choose_export
from tuner.results.study_reader import StudyResults, TrialRow
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import LoopSettings, StudyLoop
from tuner.study.search.sampling import make_sampler
from tuner.study.space import config_key
from tuner.study.stages.confirm import plan_confirmation, queue_rounds

BUDGETS = (0.10, 0.25, 0.50)
SLOTS = (1,)  # the README's rows; `--slots 1,2,4` adds parallel studies (about 3x the time)


@dataclass(frozen=True)
class StudyRun:
    """What one replayed study gave: hit at each budget, and the cost to first reach."""

    hits: tuple[bool, ...]
    reach: float | None  # share of the grid's cost; None: not within the largest budget
    trials: int
    spent: tuple[float, ...]  # share of the grid's cost used by each budget's answer
    # Per budget: the export was the baseline (no candidate beat it beyond the noise).
    baseline: tuple[bool, ...] = ()
    # Per budget: a near-best config had finished unpruned by then (what a perfect pick of the
    # finished trials would export; the ceiling of any export rule on this search).
    found: tuple[bool, ...] = ()
    # Per budget: the exported config's key (None: nothing to export).
    exports: tuple[str | None, ...] = ()
    # Per budget, two picks beside the export rule's: the config of the highest single run
    # finished unpruned ("naive"), and the best such config by the replayed world's own means
    # ("oracle": the ceiling of any pick from what the search ran).
    naive: tuple[str | None, ...] = ()
    oracle: tuple[str | None, ...] = ()


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


def _search(
    table: GridTable, search: Search, slots: int, seed: int, budget: float
) -> tuple[optuna.Study, _Recorder]:
    """Run the study loop until `budget` (share of the grid's cost) is spent; no confirmation."""
    grid_cost = table.grid_cost_s()
    preset = table.preset
    study = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed),  # unused: the loop enqueues every run
    )
    backend = _Recorder(table, slots, random.Random(seed * 7919 + slots), _drift(seed))
    if search.sampler is None:
        study.enqueue_trial(preset.baseline_params(), user_attrs={TrialAttr.ROLE: "baseline"})
        base = config_key(preset.baseline_params())
        for key in table.order:
            if key != base:
                study.enqueue_trial(
                    table.configs[key].params, user_attrs={TrialAttr.ROLE: "candidate"}
                )
    settings = LoopSettings(
        n_trials=len(table.configs),
        seed=seed,
        timeout_s=budget * grid_cost / slots,
        prune_rule=search.prune,
        sampler_factory=search.sampler or make_sampler,
    )
    StudyLoop(study, preset, backend, _request_factory(preset), settings).run()
    return study, backend


def _request_factory(preset: Any) -> Any:
    # The driver's own request factory: the preset's server spec, workload and plain benchmark.
    return request_factory(preset, model_path="recorded", cache_dir=Path("."))


def run_study(table: GridTable, search: Search, slots: int, seed: int) -> StudyRun:
    """One seeded study; its answers at each budget and the cost to first reach a near-best."""
    if search.confirm is not None:
        return _run_confirmed(table, search, slots, seed)
    grid_cost = table.grid_cost_s()
    study, backend = _search(table, search, slots, seed, max(BUDGETS))
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    ends = sorted((e, n) for n, (_, e) in backend.spans.items())
    # Reach: the first finished, unpruned trial of a near-best config.
    reach = None
    for end, n in ends:
        t = trials[n]
        if t.state.name == "COMPLETE" and table.near_best(config_key(dict(t.params))):
            reach = backend.spent(end) / grid_cost
            break
    picks, others = [], []
    cache: dict[int, tuple[bool, bool, str | None]] = {}
    found = []
    for budget in BUDGETS:
        at = _time_at(backend, budget * grid_cost)
        done = [n for end, n in ends if end <= at]
        if len(done) not in cache:
            cache[len(done)] = _exported(table, trials, backend.results, done)
        picks.append(cache[len(done)])
        others.append(_picks(table, trials, backend.results, done))
        found.append(reach is not None and reach <= budget + 1e-9)
    if reach is not None and reach > max(BUDGETS):
        reach = None
    hits = tuple(h for h, _, _ in picks)
    base, keys = tuple(b for _, b, _ in picks), tuple(k for _, _, k in picks)
    naive, oracle = tuple(a for a, _ in others), tuple(b for _, b in others)
    return StudyRun(hits, reach, len(ends), BUDGETS, base, tuple(found), keys, naive, oracle)


def _picks(
    table: GridTable, trials: dict[int, Any], results: dict[int, Any], done: list[int]
) -> tuple[str | None, str | None]:
    """(config of the highest single finished unpruned run, best such config by the table)."""
    full = [
        (r.workload.tasks_per_hour, config_key(dict(trials[n].params)))
        for n, r in ((n, results.get(n)) for n in done)
        if r is not None and r.workload is not None and not r.pruned
    ]
    if not full:
        return None, None
    keys = {k for _, k in full}
    return max(full)[1], max(keys, key=lambda k: table.configs[k].tasks_per_hour)


def _run_confirmed(table: GridTable, search: Search, slots: int, seed: int) -> StudyRun:
    """Search for each budget, then confirm as `tuner optimize` does; cost includes both."""
    assert search.confirm is not None
    k, rounds = search.confirm
    grid_cost = table.grid_cost_s()
    picks, spent, n_runs, others = [], [], 0, []
    for budget in BUDGETS:
        study, backend = _search(table, search, slots, seed, budget)
        rank = "raw" if search.raw_finalists else "pooled"
        finalists = plan_confirmation(study.get_trials(deepcopy=False), k, rank=rank)
        queue_rounds(study, finalists, rounds)
        settings = LoopSettings(n_trials=None, seed=seed, prune_rule=search.prune)
        StudyLoop(study, table.preset, backend, _request_factory(table.preset), settings).run()
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        picks.append(_exported(table, trials, backend.results, sorted(backend.spans)))
        others.append(_picks(table, trials, backend.results, sorted(backend.spans)))
        spent.append(backend.spent(backend.clock) / grid_cost)
        n_runs = len(backend.spans)
    hits, base = tuple(h for h, _, _ in picks), tuple(b for _, b, _ in picks)
    keys = tuple(k for _, _, k in picks)
    naive, oracle = tuple(a for a, _ in others), tuple(b for _, b in others)
    return StudyRun(hits, None, n_runs, tuple(spent), base, (), keys, naive, oracle)


def _time_at(backend: GridReplayBackend, spent: float) -> float:
    """The clock time at which the study had used `spent` slot-seconds (bisection)."""
    lo, hi = 0.0, max((e for _, e in backend.spans.values()), default=0.0)
    if backend.spent(hi) <= spent:
        return hi
    for _ in range(60):
        mid = (lo + hi) / 2
        if backend.spent(mid) < spent:
            lo = mid
        else:
            hi = mid
    return hi


def _exported(
    table: GridTable,
    trials: dict[int, optuna.trial.FrozenTrial],
    results: dict[int, Any],
    done: list[int],
) -> tuple[bool, bool, str | None]:
    """What `tuner export` would pick from the trials `done`: (near-best on `table`, the
    baseline, its config key)."""
    rows = tuple(sorted((_row(trials[n], results.get(n)) for n in done), key=lambda r: r.number))
    results_ = StudyResults(
        study_name="replay", storage="memory", model=None, gpu=None, trials=rows,
        mode=table.preset.workload.mode,
    )  # fmt: skip
    try:
        choice = choose_export(results_)
    except StudyError:
        return False, False, None
    is_base = choice.baseline is not None and choice.trial.number == choice.baseline.number
    key = config_key(dict(choice.trial.params))
    return table.near_best(key), is_base, key


# ---- many studies ---------------------------------------------------------------------------

_TABLE: GridTable | None = None
_WORLDS: list[GridTable] = []  # posterior world: one table per truth draw (seed % draws)
_DRIFTS: list[float] = []  # measured noise: the fitted sittings' drifts, log tasks/h an hour


def _drift(seed: int) -> float:
    """A study's drift: one of the fitted sittings' (either sign), chosen by the seed."""
    if not _DRIFTS:
        return 0.0
    rng = random.Random(seed * 104729 + 17)
    return rng.choice(_DRIFTS) * rng.choice((-1.0, 1.0))


def _init(
    path: str,
    worlds: list[dict[str, float]] | None = None,
    noise: tuple[float, list[float]] | None = None,
) -> None:
    """A worker's state: the recorded grid and, for the posterior world, each draw's mus;
    `noise` (run sd, drifts an hour): the measured noise instead of the grid's repeats."""
    global _TABLE
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _TABLE = GridTable.load(Path(path))
    _DRIFTS[:] = []
    if noise is not None:
        _TABLE = _TABLE.with_run_sd(noise[0])
        _DRIFTS[:] = noise[1]
    _WORLDS[:] = [world_table(_TABLE, mus) for mus in worlds or []]
    _memoized_paired_ratio()


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


def _one(job: tuple[int, int, int]) -> tuple[int, int, int, StudyRun]:
    search_i, slots, seed = job
    assert _TABLE is not None
    table = _WORLDS[seed % len(_WORLDS)] if _WORLDS else _TABLE
    return search_i, slots, seed, run_study(table, SEARCHES_ALL[search_i], slots, seed)
