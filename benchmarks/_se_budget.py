"""`sample_efficiency.py --total-budget`: every study at an equal TOTAL cost (search, floor start
and confirmation together), through the confirmation stage that ships.

A study of total budget B (a share of the grid's cost) and split s searches as `tuner optimize
--budget B` does (`budgeted_search`: tuner's own loop, the preset's screening, and the product's
`tuner.study.search.budget.Budget` on the simulated clock, its share of the runs fixed to s): the
sampler's target is the plan's trials, revised on each measured run
(`loop_budget._set_budget_target`), and no search trial starts that cannot finish before the
time the plan's confirmation runs need (`Budget.may_start_search`). Then it runs the stage as
`tuner.study.stages.confirm.confirm_study` does under `--budget`, on the replayed runs and with
the same `Budget` on the same clock (the stage's runs teach it their cost, as `run_waiting`'s
loop does):

1. the floor start (the baseline's round 0: `queue_rounds([baseline], 1)`), when the study has a
   candidate and the budget fits it (`confirm_budget._floor_fits`);
2. the finalists and the cap the product chooses (`confirm_budget._budget_plan`:
   `Budget.confirm_choice` at the study's measured noise, `tuner.results.decision.study_noise`
   of the replayed runs, the prior updated by the baseline's starts): the cheapest plan that
   reaches 80% power for a true +10% with slow starts, else the plan of most power the time left
   pays for, up to the power table's largest K (`Budget.k_power`: no `--confirm` was given);
   none fits: no confirmation. The top K by the pooled evidence of every run
   (`rank_finalists`, the product's noise floor);
3. the stage's sequential rounds themselves (`confirm.run_looks`: the same looks, O'Brien-Fleming
   levels for the cap, futility stop and drops, through `tuner.results.export.confirmation_look`
   on the first rounds' runs), each round queued by `confirm.queue_rounds` only while the
   budget fits it (`queue_next_rounds`: else the stage stops on "the budget") and
   run by the loop;
4. what `tuner export` picks (`choose_export`) from every finished run.

Random search gets the same screening, the same stage and the same split, seed by seed (same
truth draw, same drift). Each (total, split) is replayed at every run noise (`--run-noise`:
between-start sd of log tasks/h; the fitted sittings' drifts stay). The split of each total is
chosen on tuner's mean regret at the first noise over seeds of their own (`--select-seeds`,
disjoint from the reported ones), so the reported rows are not the best of several draws; K is
not chosen there (each study's is its budget's power choice; the tables give the median).
"""

from __future__ import annotations

import math
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.trial import TrialState

from benchmarks._grid_replay import GridTable
from benchmarks._se_replay import (
    DEFAULT,
    RANDOM_DEFAULT,
    Search,
    _exported,
    _memoized_paired_ratio,
    _Recorder,
    _request_factory,
    new_study,
    study_results,
    world_table,
)
from tuner.metrics import DEFAULT_NOISE
from tuner.results.decision import study_noise
from tuner.results.export import confirmation_look
from tuner.study.search.budget import END_RESERVE_S, Budget
from tuner.study.search.estimate import planned_run_s
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.power import LARGEST_K
from tuner.study.space import config_key
from tuner.study.stages.confirm import floor_start_needed
from tuner.study.stages.confirm_budget import (
    _budget_plan,
    _BudgetStop,
    _floor_fits,
    queue_next_rounds,
)
from tuner.study.stages.confirm_finalists import _baseline, rank_finalists
from tuner.study.stages.confirm_looks import _first_rounds, run_looks
from tuner.study.stages.confirm_plan import ConfirmPlan
from tuner.study.stages.confirm_rounds import queue_rounds

SEARCHES = (DEFAULT, RANDOM_DEFAULT)
BY_POWER = "power"  # a choice's K: each study's stage takes `Budget.confirm_choice`'s
NEAR = 0.05  # hit: an export within 5% of the best config's tasks/h
BOOT = 2000  # bootstrap resamples of the seeds


@dataclass(frozen=True)
class Budgeted:
    """One study at a total budget: what it exported and what it spent."""

    export: str | None
    spent: float  # share of the grid's cost, search + floor + confirmation
    search: float  # share of the grid's cost the search used
    rounds: int  # confirmation rounds run (0: none)
    cap: int  # the plan's cap R (0: no confirmation fitted)
    stop: str  # why the stage stopped: win, futile, cap, budget, none
    baseline: bool  # the export is the baseline
    k: int = 0  # finalists the budget's power choice took (0: no confirmation fitted)
    # Every config the study completed a run of (search and stage): what a perfect choice
    # could have exported, so the regret of its best is the search's floor, not the choice's.
    completed: tuple[str, ...] = ()


@dataclass
class SplitBudget(Budget):
    """The product's `Budget` with the search's share of the runs fixed to `split`, the share
    under test: the product reads it from `budget_plan.BUDGET_SEARCH_SHARE`, which this replay
    chooses. Everything else (the plan, its revisions, the guard) is `Budget`'s own."""

    split: float = 0.7

    def share(self) -> float:
        return self.split


def replay_budget(table: GridTable, backend: _Recorder, total: float, split: float) -> SplitBudget:
    """The budget `tuner optimize --budget` would build (`pipeline.start.study_budget`) for
    `total` of the grid's cost with no `--confirm` given, on the backend's clock: its server
    runs get `total` of the grid's cost (the end's reserve, driver time the replay does not
    spend, on top), the confirmation's caps are the preset's plan (`ConfirmPlan.for_preset`),
    its power choice may take up to the power table's largest K unless the preset fixed one
    (the pipeline's `k_power`), one slot, no baseline re-runs (the replay's search runs none),
    the preset's run estimate until the first run is measured."""
    preset = table.preset
    estimate = planned_run_s(preset, window_s=preset.window_s)
    plan = ConfirmPlan.for_preset(preset)
    chosen_k = preset.confirm is not None  # `pipeline.optimize`: no --confirm in the replay
    return SplitBudget(
        budget_s=total * table.grid_cost_s() + END_RESERVE_S,
        k=plan.k,
        rounds=plan.rounds,
        floor=floor_start_needed(preset),
        baseline_every=0,
        estimate_s=estimate[0] if estimate else None,
        clock=backend.now,
        start=backend.now(),
        space_size=len(table.configs),
        k_power=plan.k if chosen_k else LARGEST_K,
        split=split,
    )


def budgeted_search(
    table: GridTable, search: Search, seed: int, total: float, split: float
) -> tuple[optuna.Study, _Recorder, SplitBudget]:
    """The search of `tuner optimize --budget` at `total` of the grid's cost with `split` of
    the runs to the search: the loop under the product's budget (`replay_budget`), its first
    target the first plan's trials as the pipeline sets it (`pipeline.run_study`). The budget
    comes back with the study: the stage goes on with the same object on the same clock."""
    study, backend = new_study(table, seed)
    budget = replay_budget(table, backend, total, split)
    first = budget.plan()
    settings = LoopSettings(
        n_trials=first.trials if first is not None else budget.slots,
        seed=seed,
        prune_rule=search.prune,
        sampler_factory=search.sampler,
        budget=budget,
    )
    StudyLoop(study, table.preset, backend, _request_factory(table.preset), settings).run()
    return study, backend, budget


def _quiet(_: str) -> None:
    """The stage's lines (the replay says nothing)."""


def run_budgeted(
    table: GridTable, search: Search, seed: int, total: float, split: float
) -> Budgeted:
    """One seeded study at total budget `total` (share of the grid's cost), the search's plan
    getting `split` of its runs (`budgeted_search`), then the stage as `confirm_study` runs it
    under `--budget`, on the same `Budget` and clock: the floor start when it fits
    (`_floor_fits`), the finalists and cap the time left buys at the study's measured noise
    (`_budget_plan`: `Budget.confirm_choice` of `study_noise` on the replayed runs), each
    round queued only while it fits (`queue_next_rounds`, the stage's own step)."""
    grid_cost = table.grid_cost_s()
    study, backend, budget = budgeted_search(table, search, seed, total, split)
    preset = table.preset
    # The stage's runs: the loop without a target under the same budget (`run_waiting`'s
    # settings), so each finished run teaches the budget its cost.
    settings = LoopSettings(n_trials=None, seed=seed, prune_rule=search.prune, budget=budget)

    def run_queue() -> None:
        StudyLoop(study, preset, backend, _request_factory(preset), settings).run()

    def spent() -> float:
        return sum(e - s for s, e in backend.spans.values())

    def results() -> Any:
        done = {t.number: t for t in study.get_trials(deepcopy=False)}
        return study_results(table, done, backend.results, list(backend.spans))

    searched = spent()
    trials = study.get_trials(deepcopy=False)
    start_sd = DEFAULT_NOISE.log_sd / math.sqrt(2)  # the CPU preset has no `between_run`
    ranked = rank_finalists(trials, noise_sd=start_sd)
    base = _baseline(trials)
    rounds, cap, k, stop = 0, 0, 0, "none"
    if base is not None and ranked and _floor_fits(budget, study, base):
        # The floor start (the baseline's round 0), then the finalists on every run.
        queue_rounds(study, [base], 1)
        run_queue()
        trials = study.get_trials(deepcopy=False)
        ranked = rank_finalists(trials, noise_sd=start_sd)
        fresh = _baseline(trials)
        # The product's choice: K and the cap from the time left and the study's noise (the
        # prior updated by the baseline's starts, as `confirm_budget.measured_noise` reads it).
        plan = _budget_plan(budget, ConfirmPlan.for_preset(preset), _quiet, study_noise(results()))
        k, cap = plan.k, plan.rounds
        finalists = [t for t, _ in ranked[: plan.k]]
        if plan.enabled and fresh is not None and finalists:

            def queue(live: list[Any], upto: int) -> int:
                return queue_rounds(study, live, upto)

            def run_rounds(live: list[Any], upto: int) -> int:
                n = 0
                for _ in range(2 * upto + 2):  # a run that fails again is not retried forever
                    more, _ = queue_next_rounds(budget, study, live, upto, queue)
                    if not more:
                        break
                    n += more
                    run_queue()
                return n

            def look(upto: int) -> Any:
                return confirmation_look(
                    _first_rounds(results(), upto), upto, plan.first_look, plan.rounds
                )

            try:
                _, (rounds, reason) = run_looks(
                    [fresh, *finalists], plan.first_look, set(), run_rounds, look
                )
                stop = (
                    "win" if "beats" in reason else "futile" if "no config can" in reason else "cap"
                )
            except _BudgetStop as short:
                rounds, stop = short.rounds, "budget"
    done = {t.number: t for t in study.get_trials(deepcopy=False)}
    is_base, key = _exported(table, done, backend.results, sorted(backend.spans))
    completed = sorted(
        {config_key(dict(t.params)) for t in done.values() if t.state == TrialState.COMPLETE}
    )
    return Budgeted(
        key, spent() / grid_cost, searched / grid_cost, rounds, cap, stop, is_base, k,
        tuple(completed),
    )  # fmt: skip


# ---- many studies ---------------------------------------------------------------------------

_WORLDS: dict[float, list[GridTable]] = {}


def init(
    path: str, worlds: list[dict[str, float]], noises: tuple[float, ...], drifts: list[float]
) -> None:
    """A worker's state: per run noise, the grid moved to each posterior draw."""
    from benchmarks import _se_replay

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    table = GridTable.load(Path(path))
    _se_replay._DRIFTS[:] = drifts
    for sd in noises:
        noisy = table.with_run_sd(sd)
        _WORLDS[sd] = [world_table(noisy, mus) for mus in worlds]
    _memoized_paired_ratio()


Job = tuple[int, float, float, float, int]  # search, total, split, noise, seed


def one(job: Job) -> tuple[Job, Budgeted]:
    i, total, split, sd, seed = job
    worlds = _WORLDS[sd]
    return job, run_budgeted(worlds[seed % len(worlds)], SEARCHES[i], seed, total, split)


# ---- the metric -----------------------------------------------------------------------------


def judge(key: str | None, base: str, keys: list[str], mu: np.ndarray) -> tuple[float, float]:
    """(regret, hit) of exporting `key` (None: nothing exported; the baseline stays) averaged
    over the rows of `mu` (draws x configs, columns in `keys` order): regret is
    1 - exp(mu(export) - max mu), hit is regret <= 5%."""
    j = keys.index(key if key is not None else base)
    gap = mu[:, j] - mu.max(axis=1)
    regret = 1 - np.exp(gap)
    return float(regret.mean()), float((regret <= NEAR + 1e-12).mean())


def record(job: Job, run: Budgeted, base: str, keys: list[str], mu: np.ndarray) -> dict[str, Any]:
    """One seed's outcome, judged in its own posterior draw (the world it searched)."""
    i, total, split, sd, seed = job
    draw = seed % len(mu)
    regret, hit = judge(run.export, base, keys, mu[draw : draw + 1])
    # The search's floor: the regret of the best config it completed a run of (the baseline's
    # when it completed none), what a perfect choice among its runs would export.
    floor = min(judge(k, base, keys, mu[draw : draw + 1])[0] for k in run.completed or (base,))
    return {
        "search": SEARCHES[i].name,
        "total": total,
        "split": split,
        "k": run.k,  # the finalists the budget's power choice took (0: no confirmation)
        "noise": sd,
        "seed": seed,
        "export": keys.index(run.export) if run.export is not None else None,
        "regret": round(regret, 5),
        "floor": round(floor, 5),
        "hit": hit,
        "spent": round(run.spent, 4),
        "search_spent": round(run.search, 4),
        "rounds": run.rounds,
        "cap": run.cap,
        "stop": run.stop,
        "baseline": run.baseline,
    }


def cell(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and median regret, hit, cost and stage facts of one search's seeds."""
    n = len(records)
    reg = [r["regret"] for r in records]
    return {
        "seeds": n,
        "regret_mean": round(sum(reg) / n, 4),
        "regret_median": round(float(statistics.median(reg)), 4),
        **_floor(records),
        "hit": round(sum(r["hit"] for r in records) / n, 4),
        "spent_median": round(float(statistics.median(r["spent"] for r in records)), 4),
        "spent_max": round(max(r["spent"] for r in records), 4),
        "baseline": round(sum(r["baseline"] for r in records) / n, 4),
        "rounds_median": float(statistics.median(r["rounds"] for r in records)),
        "cap_median": float(statistics.median(r["cap"] for r in records)),
        "k_median": float(statistics.median(r["k"] for r in records)),
        "ks": {
            str(k): sum(r["k"] == k for r in records) for k in sorted({r["k"] for r in records})
        },
        "stops": {
            s: sum(r["stop"] == s for r in records) for s in ("win", "futile", "cap", "budget")
        },
    }


def _floor(records: list[dict[str, Any]]) -> dict[str, float]:
    """The mean and median of the seeds' floors (the best completed config's regret); none in
    a per-seed file written before the floor was recorded."""
    floors = [r["floor"] for r in records if "floor" in r]
    if len(floors) < len(records):
        return {}
    return {
        "floor_mean": round(sum(floors) / len(floors), 4),
        "floor_median": round(float(statistics.median(floors)), 4),
    }


def paired_diff(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean regret a - b over the seeds both ran, with a percentile bootstrap 95% interval."""
    by_b = {r["seed"]: r["regret"] for r in b}
    d = np.array([r["regret"] - by_b[r["seed"]] for r in a if r["seed"] in by_b])
    idx = np.random.default_rng(0).integers(0, len(d), size=(BOOT, len(d)))
    lo, hi = np.quantile(d[idx].mean(axis=1), [0.025, 0.975])
    return {
        "diff": round(float(d.mean()), 4),
        "interval": [round(float(lo), 4), round(float(hi), 4)],
        "seeds": len(d),
    }


def group(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    out: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault((r["search"], r["total"], r["split"], r["noise"]), []).append(r)
    return out


def choose_splits(records: list[dict[str, Any]], noise: float) -> dict[str, dict[str, Any]]:
    """Per total: the split with tuner's lowest mean regret at `noise` (ties: the lower
    median, then more search), with every candidate's cell. K is not chosen here: each study's
    stage takes the budget's power choice (`Budget.confirm_choice`), so the choice's `k` is
    "power" and each cell says the K the studies took (`k_median`, `ks`)."""
    cells = group(records)
    out: dict[str, dict[str, Any]] = {}
    for total in sorted({r["total"] for r in records}):
        tried = []
        for (name, t, split, sd), rs in sorted(cells.items()):
            if name == DEFAULT.name and t == total and sd == noise:
                c = cell(rs)
                tried.append({"split": split, **c})
        best = min(tried, key=lambda c: (c["regret_mean"], c["regret_median"], -c["split"]))
        out[f"{total:.0%}"] = {"split": best["split"], "k": BY_POWER, "tried": tried}
    return out


def rows(records: list[dict[str, Any]], chosen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The table: per total at its chosen split, tuner and random (same stage), every noise,
    with tuner minus random paired by seed."""
    cells = group(records)
    out = []
    for label, pick in chosen.items():
        total = float(label.rstrip("%")) / 100
        for s in SEARCHES:
            row: dict[str, Any] = {
                "search": s.name, "total": label, "split": pick["split"], "k": BY_POWER,
                "noise": {},
            }  # fmt: skip
            for sd in sorted({r["noise"] for r in records}):
                rs = cells.get((s.name, total, pick["split"], sd))
                if not rs:
                    continue
                c = cell(rs)
                if s is DEFAULT:
                    other = cells[(RANDOM_DEFAULT.name, total, pick["split"], sd)]
                    c["minus_random"] = paired_diff(rs, other)
                row["noise"][f"{sd:.0%}"] = c
            out.append(row)
    return out


# ---- words ----------------------------------------------------------------------------------


def short_name(name: str) -> str:
    return "tuner" if name == DEFAULT.name else "random"


def _points(d: dict[str, Any]) -> str:
    """A paired difference of regret in points with its interval: "+1.2 points (-0.3 to +2.5)"."""
    lo, hi = d["interval"]
    return f"{d['diff'] * 100:+.1f} points ({lo * 100:+.1f} to {hi * 100:+.1f})"


def table_lines(rows_: list[dict[str, Any]]) -> list[str]:
    """The README's table: each total at its chosen split, tuner and random with the same
    stage, regret mean (median) at each run noise, the paired difference, the cost."""
    noises = list(rows_[0]["noise"])
    head = [f"regret, noise {n} mean (median)" for n in noises]
    out = [
        "| total cost | search (split) | " + " | ".join(head)
        + " | tuner - random, noise " + noises[0] + " | cost median (max) | baseline exported |",
        "|---|---|" + "---|" * len(head) + "---|---|---|",
    ]  # fmt: skip
    for r in rows_:
        c0 = r["noise"][noises[0]]
        cells = [
            f"{r['noise'][n]['regret_mean']:.1%} ({r['noise'][n]['regret_median']:.1%})"
            for n in noises
        ]
        diff = _points(c0["minus_random"]) if c0.get("minus_random") else ""
        split = f"{r['split']:.0%} of the runs, confirm by power: K {c0['k_median']:g} median"
        out.append(
            f"| {r['total']} | {short_name(r['search'])} ({split}) | " + " | ".join(cells)
            + f" | {diff} | {c0['spent_median']:.1%} ({c0['spent_max']:.1%}) "
            f"| {c0['baseline']:.0%} |"
        )  # fmt: skip
    return out


def verdict(rows_: list[dict[str, Any]], goal_total: str = "25%", regret: float = 0.03) -> str:
    """Issue 44's goal at `goal_total` of the total cost, at the first noise, met or not (a
    replay without that total, or with one noise only, says so rather than failing)."""
    tuner = next(
        (r for r in rows_ if r["total"] == goal_total and r["search"] == DEFAULT.name), None
    )
    if tuner is None:
        return f"Goal (issue 44) is judged at {goal_total} total cost, which this replay left out."
    noises = list(tuner["noise"])
    c = tuner["noise"][noises[0]]
    d = c["minus_random"]
    met = c["regret_median"] <= regret and d["interval"][1] < 0
    floor = (
        f" The search's floor there (the best config a study completed a run of, what a perfect "
        f"choice among its runs would export): median {c['floor_median']:.1%}."
        if "floor_median" in c
        else ""
    )
    others = "; ".join(
        f"at noise {n}: median {tuner['noise'][n]['regret_median']:.1%}, minus random "
        + _points(tuner["noise"][n]["minus_random"])
        for n in noises[1:]
    )
    return (
        f"Goal (issue 44) at {goal_total} total cost, noise {noises[0]}: median regret <= "
        f"{regret:.0%}, mean below random's by a paired bootstrap 95% interval: "
        f"median {c['regret_median']:.1%}, minus random {_points(d)}: "
        + ("met" if met else "not met")
        + "."
        + (f" {others[0].upper()}{others[1:]}." if others else "")
        + floor
    )


# ---- the run --------------------------------------------------------------------------------

SELECT_FROM = 500  # the selection's seeds start here (posterior draws 500.., never 0..99)


def _replay(
    jobs: list[Job], path: Path, worlds: list[dict[str, float]], noises: tuple[float, ...],
    drifts: list[float], n_jobs: int,
) -> list[tuple[Job, Budgeted]]:  # fmt: skip
    from concurrent.futures import ProcessPoolExecutor

    init_args = (str(path), worlds, noises, drifts)
    if n_jobs <= 1:
        init(*init_args)
        return [one(j) for j in jobs]
    with ProcessPoolExecutor(n_jobs, initializer=init, initargs=init_args) as pool:
        return list(pool.map(one, jobs, chunksize=4))


def run_all(  # noqa: PLR0913 (every --total-budget option, keyword-only, from main)
    data: Path, keys: list[str], mu: np.ndarray, base: str, drifts: list[float],
    *, totals: tuple[float, ...], splits: tuple[float, ...],
    noises: tuple[float, ...], seeds: int, select_seeds: int, n_jobs: int,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, Any]]]:  # fmt: skip
    """Choose each total's split on tuner alone over `select_seeds` seeds of their own (first
    noise), then replay tuner and random at the chosen ones over `seeds` seeds at every noise;
    each study's K and cap are its budget's power choice. Returns (the selection's records,
    the reported records, the choice)."""
    n_worlds = max(seeds, SELECT_FROM + select_seeds)
    worlds = [dict(zip(keys, map(float, mu[s % len(mu)]), strict=True)) for s in range(n_worlds)]
    picks = [
        (0, t, s, noises[0], seed)
        for t in totals
        for s in splits
        for seed in range(SELECT_FROM, SELECT_FROM + select_seeds)
    ]
    if len(splits) > 1:
        selection = [record(j, r, base, keys, mu) for j, r in _replay(
            picks, data, worlds, noises[:1], drifts, n_jobs)]  # fmt: skip
        chosen = choose_splits(selection, noises[0])
    else:
        selection = []
        chosen = {f"{t:.0%}": {"split": splits[0], "k": BY_POWER, "tried": []} for t in totals}
    jobs = [
        (i, t, chosen[f"{t:.0%}"]["split"], sd, seed)
        for i in range(len(SEARCHES))
        for t in totals
        for sd in noises
        for seed in range(seeds)
    ]
    reported = [record(j, r, base, keys, mu) for j, r in _replay(
        jobs, data, worlds, noises, drifts, n_jobs)]  # fmt: skip
    return selection, reported, chosen


def split_doc(chosen: dict[str, dict[str, Any]], source: str, noise: float) -> dict[str, Any]:
    """The chosen split per total, for planning `tuner optimize --budget`."""
    return {
        "about": (
            "Written by benchmarks/sample_efficiency.py --total-budget: per total budget (share "
            "of the grid's cost), the split between search and confirmation with tuner's lowest "
            "mean regret in the replay through the shipped confirmation stage. search_share: "
            "the search's share of the budget's server runs (Budget.share, the plan's split); "
            "search and confirm: that share of the total as shares of the grid's cost, nominal "
            "(the plan counts full runs and a screened-out run costs less, so the search may "
            'run more); confirm_k: "power": the finalists and the cap of rounds are each '
            "study's budget's power choice (Budget.confirm_choice at the study's measured noise, "
            "up to tuner.study.search.power.LARGEST_K finalists), not the split's; "
            "confirm_k_median: the median K that choice took on the selection's seeds."
        ),
        "source": source,
        "chosen_at_noise": noise,
        "totals": {
            label: {
                "total": float(label.rstrip("%")) / 100,
                "search_share": c["split"],
                "search": round(c["split"] * float(label.rstrip("%")) / 100, 4),
                "confirm": round((1 - c["split"]) * float(label.rstrip("%")) / 100, 4),
                "confirm_k": c["k"],
                "confirm_k_median": next(
                    (t["k_median"] for t in c["tried"] if t["split"] == c["split"]), None
                ),
            }
            for label, c in chosen.items()
        },
    }


def tried_lines(chosen: dict[str, dict[str, Any]]) -> list[str]:
    """Every split tried, per total: tuner's regret at the selection's noise and seeds."""
    out = [
        "| total | search share | K by power, median (studies per K) | regret mean (median) | "
        "hit | cost median (max) | baseline exported | rounds (cap) median | "
        "stops win/futile/cap/budget |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, c in chosen.items():
        for t in c["tried"]:
            mark = " **chosen**" if t["split"] == c["split"] else ""
            s = t["stops"]
            ks = ", ".join(f"K {k}: {n}" for k, n in t["ks"].items())
            out.append(
                f"| {label} | {t['split']:.0%}{mark} | {t['k_median']:g} ({ks}) | "
                f"{t['regret_mean']:.1%} "
                f"({t['regret_median']:.1%}) | {t['hit']:.0%} | {t['spent_median']:.1%} "
                f"({t['spent_max']:.1%}) | {t['baseline']:.0%} | {t['rounds_median']:.0f} "
                f"({t['cap_median']:.0f}) | {s['win']}/{s['futile']}/{s['cap']}/{s['budget']} |"
            )
    return out
