"""How fast the search finds the best config: seeded studies replayed over a recorded grid.

Every study runs tuner's own loop (`tuner.study.search.loop.StudyLoop`: sampler, pruner rule,
duplicate handling, constraints, budget) on a simulated-clock backend that answers from the
grid recorded by `benchmarks/record_grid.py` (`benchmarks/_grid_replay.py`: noise by resampling the
recorded per-task outcomes; a trial costs its recorded seconds, a pruned one what it ran). At
10%, 25% and 50% of the grid's cost (slot-seconds: with several slots, the time of all of
them) the study's answer is what `tuner export` would pick (`tuner.results.export
.choose_export`) from the trials finished by then. Printed per search and number of slots:

- **hit**: the share of seeds whose exported config is within 5% of the grid's best recorded
  successful tasks/h;
- **reach**: the median cost (share of the grid's) at which the search first finished a trial
  of such a config ("-" when fewer than half the seeds did within 50%).

Searches: tuner's (its sampler and pruner, as shipped), random search (uniform draws, the same
pruner), the grid in order (every config in `record_grid.grid` order, none pruned, as a sweep
would), and `tuner optimize` on the CPU preset as shipped: the search with the preset's
screening, then its confirmation stage (`ConfirmPlan.for_preset`, through
`tuner.study.stages.confirm`'s own planning and the same loop); its cells also give what the
answer cost in all. Goal (issue 12): hit >= 90% at 25% of the grid's cost, above random search.

    python benchmarks/sample_efficiency.py [--seeds 100] [--data FILE] [--jobs N] [--variants]
        [--slots 1,2,4] [--screening] [--out FILE.md] [--readme README.md]

One slot by default (a study on one GPU, as the README's rows): the README's command replays
its 600 studies in under five minutes on 2 cores (205-264 s on a 2-core Zen 3); `--slots 1,2,4`
also replays two and four parallel trials (Ray workers), each slot count as long again.

The table is printed and written, with the command that made it, to `--out` (default
benchmarks/data/sample-efficiency-<grid>.md, named after `--data`) and beside it as JSON (same name,
.json): the README quotes that file, and tests/unit/test_readme_figures.py checks it does.

`--variants` also replays other sampler and pruner settings (TPE start-up trials, independent
TPE, no constant liar, GPSampler (SciPy, in the test extras), pruning warm-up and start) and
confirmation settings (`tuner + screening + confirm K,R`) to choose between them; `--only NAME`
(repeatable) keeps the named searches alone. Replay mode numbers: load shape, not graded
answers. An incomplete grid is refused (exit 2) unless a complete part of it holds the baseline
(see `_replay.GridTable.partial`).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import importlib.util
import json
import os
import random
import re
import statistics
import sys
import textwrap
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
from _grid_replay import DATA, LARGE_DATA, SCREEN_RULES, GridTable
from _grid_replay_backend import GridReplayBackend

from tuner.attrs import TrialAttr
from tuner.errors import StudyError
from tuner.results import decision
from tuner.results.export import choose_export
from tuner.results.study_reader import StudyResults, TrialRow
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import LoopSettings, StudyLoop
from tuner.study.search.pruning import PruneRule
from tuner.study.search.sampling import SamplerFactory, make_sampler
from tuner.study.space import config_key, load_preset
from tuner.study.stages.confirm import ConfirmPlan, plan_confirmation, queue_rounds

BUDGETS = (0.10, 0.25, 0.50)
SLOTS = (1,)  # the README's rows; `--slots 1,2,4` adds parallel studies (about 3x the time)
NEVER = PruneRule(min_completed=10**9)


@dataclass(frozen=True)
class Search:
    """One way of searching: a sampler (None: the grid in order) and a prune rule."""

    name: str
    sampler: SamplerFactory | None
    prune: PruneRule
    confirm: tuple[int, int] | None = None  # (top k, rounds): confirm as `tuner optimize` does


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
SEARCHES = (
    Search("tuner", make_sampler, PruneRule()),
    Search("random", _random, PruneRule()),
    Search("grid in order", None, NEVER),
    # `tuner optimize` on the CPU preset as shipped (its screening and confirmation stage);
    # the budget is the search's, the cost printed is all of it.
    DEFAULT,
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
            startup = self.startup if self.startup is not None else max(3, min(10, n_trials // 3))
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
    Search("TPE start-up 5", Tpe(5), PruneRule()),
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
    screen = PruneRule(screening=SCREEN_RULES["shipped"])
    return [
        Search(f"tuner + screening + confirm {k},{r}", make_sampler, screen, confirm=(k, r))
        for k, r in ((1, 2), (2, 2), (1, 3))
    ]


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
    backend = _Recorder(table, slots, random.Random(seed * 7919 + slots))
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
    picks = []
    cache: dict[int, tuple[bool, bool]] = {}
    found = []
    for budget in BUDGETS:
        at = _time_at(backend, budget * grid_cost)
        done = [n for end, n in ends if end <= at]
        if len(done) not in cache:
            cache[len(done)] = _exported(table, trials, backend.results, done)
        picks.append(cache[len(done)])
        found.append(reach is not None and reach <= budget + 1e-9)
    if reach is not None and reach > max(BUDGETS):
        reach = None
    hits = tuple(h for h, _ in picks)
    return StudyRun(hits, reach, len(ends), BUDGETS, tuple(b for _, b in picks), tuple(found))


def _run_confirmed(table: GridTable, search: Search, slots: int, seed: int) -> StudyRun:
    """Search for each budget, then confirm as `tuner optimize` does; cost includes both."""
    assert search.confirm is not None
    k, rounds = search.confirm
    grid_cost = table.grid_cost_s()
    picks, spent, n_runs = [], [], 0
    for budget in BUDGETS:
        study, backend = _search(table, search, slots, seed, budget)
        queue_rounds(study, plan_confirmation(study.get_trials(deepcopy=False), k), rounds)
        settings = LoopSettings(n_trials=None, seed=seed, prune_rule=search.prune)
        StudyLoop(study, table.preset, backend, _request_factory(table.preset), settings).run()
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        picks.append(_exported(table, trials, backend.results, sorted(backend.spans)))
        spent.append(backend.spent(backend.clock) / grid_cost)
        n_runs = len(backend.spans)
    hits, base = tuple(h for h, _ in picks), tuple(b for _, b in picks)
    return StudyRun(hits, None, n_runs, tuple(spent), base)


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
) -> tuple[bool, bool]:
    """What `tuner export` would pick from the trials `done`: (near-best, the baseline)."""
    rows = tuple(sorted((_row(trials[n], results.get(n)) for n in done), key=lambda r: r.number))
    results_ = StudyResults(
        study_name="replay", storage="memory", model=None, gpu=None, trials=rows,
        mode=table.preset.workload.mode,
    )  # fmt: skip
    try:
        choice = choose_export(results_)
    except StudyError:
        return False, False
    is_base = choice.baseline is not None and choice.trial.number == choice.baseline.number
    return table.near_best(config_key(dict(choice.trial.params))), is_base


# ---- many studies ---------------------------------------------------------------------------

_TABLE: GridTable | None = None


def _init(path: str) -> None:
    global _TABLE
    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    _TABLE = GridTable.load(Path(path))
    _memoized_paired_ratio()


def _one(job: tuple[int, int, int]) -> tuple[int, int, StudyRun]:
    search_i, slots, seed = job
    assert _TABLE is not None
    return search_i, slots, run_study(_TABLE, SEARCHES_ALL[search_i], slots, seed)


SEARCHES_ALL: list[Search] = list(SEARCHES)


def _shares(runs: list[StudyRun], field: str) -> list[float] | None:
    """Per budget, the share of seeds where `field` (a per-budget flag of StudyRun) holds."""
    if not all(len(getattr(r, field)) == len(BUDGETS) for r in runs):
        return None
    return [sum(getattr(r, field)[i] for r in runs) / len(runs) for i in range(len(BUDGETS))]


def summarize(runs: list[StudyRun]) -> tuple[list[float], float | None]:
    """Hit share per budget, and the median reach (None if under half the seeds reached)."""
    shares = [sum(r.hits[i] for r in runs) / len(runs) for i in range(len(BUDGETS))]
    reached = sorted(r.reach if r.reach is not None else float("inf") for r in runs)
    median = statistics.median(reached)
    return shares, None if median == float("inf") else median


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--data", type=Path, default=LARGE_DATA if LARGE_DATA.is_file() else DATA)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--slots",
        default=",".join(map(str, SLOTS)),
        help="slot counts to replay, e.g. 1 (the README's rows are one slot)",
    )
    parser.add_argument("--variants", action="store_true", help="also the settings compared")
    parser.add_argument(
        "--only",
        action="append",
        metavar="SEARCH",
        help="replay only this search (by its printed name; repeat for several)",
    )
    parser.add_argument(
        "--out", type=Path, help="the Markdown table (and .json); default: named after --data"
    )
    parser.add_argument(
        "--screening", action="store_true", help="also tuner and random search with screening"
    )
    parser.add_argument(
        "--readme",
        type=Path,
        help="rewrite this README's sample-efficiency section from the result (needs --screening)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="no replay: rewrite --readme from the JSON beside --out (what the last run wrote)",
    )
    args = parser.parse_args()
    args.out = args.out or out_path(args.data)
    if args.render:
        if args.readme is None:
            print("--render rewrites a README: name it with --readme README.md", file=sys.stderr)
            return 2
        return write_readme(args.readme, json.loads(args.out.with_suffix(".json").read_text()))
    if args.readme is not None and args.only:
        print("--readme quotes every search's row: leave out --only", file=sys.stderr)
        return 2
    if args.readme is not None and not args.screening:
        print("--readme quotes the screening rows: add --screening", file=sys.stderr)
        return 2
    if args.screening:
        SEARCHES_ALL.extend(_screening_searches(all_rules=args.variants))
    if args.variants:
        SEARCHES_ALL.extend(VARIANTS)
        SEARCHES_ALL.extend(_confirm_variants())
    if args.only:
        unknown = [n for n in args.only if n not in {s.name for s in SEARCHES_ALL}]
        if unknown:
            names = ", ".join(repr(s.name) for s in SEARCHES_ALL)
            print(f"--only {unknown[0]!r}: no such search here; one of {names}", file=sys.stderr)
            return 2
        SEARCHES_ALL[:] = [s for s in SEARCHES_ALL if s.name in args.only]
        if importlib.util.find_spec("scipy") is None:
            # GPSampler needs SciPy (the test extras install it; tuner itself does not need it).
            print("GPSampler not compared: `pip install scipy` to include it", file=sys.stderr)
            SEARCHES_ALL[:] = [s for s in SEARCHES_ALL if not isinstance(s.sampler, Gp)]
    if not args.data.is_file():
        print(f"no grid at {args.data}: record it with benchmarks/record_grid.py", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    table = GridTable.load(args.data)
    if missing := table.missing():
        print(
            f"{args.data}: {len(missing)} configs of its space are not recorded yet (first: "
            f"{missing[0]}); finish the recording with benchmarks/record_grid.py",
            file=sys.stderr,
        )
        return 2
    slots = tuple(int(x) for x in args.slots.split(","))
    jobs = [(i, k, s) for i in range(len(SEARCHES_ALL)) for k in slots for s in range(args.seeds)]
    out: dict[tuple[int, int], list[StudyRun]] = {}
    with ProcessPoolExecutor(args.jobs, initializer=_init, initargs=(str(args.data),)) as pool:
        for i, k, run in pool.map(_one, jobs, chunksize=8):
            out.setdefault((i, k), []).append(run)
    took = time.monotonic() - t0
    lines, rows = _table(table, out, args.seeds, took, slots)
    grid = grid_facts(table, args.data, args.seeds, took)
    grid["knob_lines"] = knob_lines(grid)  # as the README quotes them
    verdict = verdict_lines(grid, rows)
    lines += verdict
    lines += ["", "What the memory knobs changed on this grid (one run per config):"]
    lines += [f"- {x}" for x in grid["knob_lines"]]
    print("\n".join(lines))
    doc = _write(args.out, lines, rows, grid, [line for line in verdict if line])
    return write_readme(args.readme, doc) if args.readme is not None else 0


def out_path(data: Path) -> Path:
    """Where the table for the grid `data` goes: benchmarks/data/sample-efficiency-<grid>.md."""
    name = data.stem.removeprefix("grid-")
    return Path(__file__).resolve().parent / "data" / f"sample-efficiency-{name}.md"


def _rel(path: Path) -> str:
    root = Path(__file__).resolve().parents[1]
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def space_words(table: GridTable) -> str:
    """The recorded space in a line: what was searched, and at which values."""
    s = table.preset.space

    def span(r: Any) -> str:
        return f"{r.low}-{r.high}" if r.high > r.low else f"{r.low}"

    kv = ", ".join(f"{b / 1e6:,.0f} MB" for b in s.kv_cache_memory_bytes or ())
    seqs = ", ".join(str(n) for n in s.max_num_seqs)
    return (
        f"no speculation and n-gram depth {span(s.num_speculative_tokens)} with lookup "
        f"min {span(s.prompt_lookup_min)} (max {span(s.prompt_lookup_max)}), KV cache {kv}, "
        f"max_num_seqs {seqs}"
    )


def knob_effects(table: GridTable) -> dict[str, dict[str, Any]]:
    """What each two-valued memory knob changed: for every pair of configs that differ only
    in it, the ratio of their recorded tasks/h (high value over low); the evidence behind the
    space reductions (`tuner.study.preflight.sizing.workload_reductions`)."""
    out: dict[str, dict[str, Any]] = {}
    space = table.preset.space
    # When each config's first run was recorded: a knob whose values were recorded far apart
    # in time reads the machine's drift too.
    at: dict[str, datetime.datetime] = {}
    for r in table.data["runs"]:
        if r.get("recorded_at"):
            when = datetime.datetime.fromisoformat(r["recorded_at"].replace("Z", "+00:00"))
            at[config_key(r["params"])] = min(when, at.get(config_key(r["params"]), when))
    for knob, values in (
        ("max_num_seqs", space.max_num_seqs),
        ("kv_cache_memory_bytes", space.kv_cache_memory_bytes or ()),
    ):
        if len(values) != 2:
            continue
        low, high = sorted(values)
        ratios, apart = [], []
        for c in table.configs.values():
            if c.params.get(knob) != low or not c.ok:
                continue
            twin = table.configs.get(config_key({**c.params, knob: high}))
            if twin is not None and twin.ok and c.tasks_per_hour > 0:
                ratios.append(twin.tasks_per_hour / c.tasks_per_hour)
                if c.key in at and twin.key in at:
                    apart.append(abs((at[twin.key] - at[c.key]).total_seconds()) / 60)
        if ratios:
            ratios.sort()
            out[knob] = {
                "low": low,
                "high": high,
                "pairs": len(ratios),
                "median": round(statistics.median(ratios), 3),
                "range": [round(ratios[0], 3), round(ratios[-1], 3)],
                "apart_min": round(statistics.median(apart)) if apart else None,
            }
    return out


def repeat_cv(table: GridTable) -> float | None:
    """Run-to-run spread of tasks/h: the pooled coefficient of variation over the configs
    recorded more than once (each a fresh server start)."""
    by_key: dict[str, list[float]] = {}
    for r in table.data["runs"]:
        if r["failure_kind"] is None and r.get("tasks_per_hour"):
            by_key.setdefault(config_key(r["params"]), []).append(float(r["tasks_per_hour"]))
    terms = [
        (statistics.variance(v) / statistics.fmean(v) ** 2, len(v) - 1)
        for v in by_key.values()
        if len(v) > 1
    ]
    df = sum(d for _, d in terms)
    return round((sum(t * d for t, d in terms) / df) ** 0.5, 4) if df else None


def knob_lines(grid: dict[str, Any]) -> list[str]:
    """One sentence per two-valued knob: what its higher value changed, beside the noise."""
    noise = grid.get("repeat_cv")
    words = {"max_num_seqs": "max_num_seqs", "kv_cache_memory_bytes": "KV cache"}
    out = []
    for knob, e in grid.get("knobs", {}).items():
        low, high = e["low"], e["high"]
        if knob == "kv_cache_memory_bytes":
            low, high = f"{low / 1e6:,.0f} MB", f"{high / 1e6:,.0f} MB"
        line = (
            f"{words.get(knob, knob)} {high} against {low}: x{e['median']:.3f} median tasks/h "
            f"ratio over {e['pairs']} config pairs differing only there "
            f"(x{e['range'][0]:.3f}-x{e['range'][1]:.3f})"
        )
        apart = e.get("apart_min")
        if apart is not None and apart >= DRIFT_APART_MIN:
            line += f", a pair's runs recorded a median {apart} min apart: knob and drift together"
        for ab in grid.get("knob_ab", {}).get(knob, []):
            line += f"; measured interleaved (benchmarks/knob_ab.py): {ab}"
        out.append(line)
    if out and noise is not None:
        out.append(f"run-to-run CV of tasks/h over the repeated configs: {noise:.1%}")
    return out


# Config pairs recorded this far apart (median minutes) read drift as well as the knob.
DRIFT_APART_MIN = 30


def knob_ab_lines() -> dict[str, list[str]]:
    """Per knob, what `benchmarks/knob_ab.py` measured interleaved (`knob_ab.figure`)."""
    import knob_ab

    out: dict[str, list[str]] = {}
    for record in knob_ab.records(knob_ab.data_path("smollm2-135m", "cpu")):
        out.setdefault(record["knob"], []).append(knob_ab.figure(record))
    return out


def grid_facts(table: GridTable, data: Path, seeds: int, took: float) -> dict[str, Any]:
    """What the README says of the grid itself."""
    best = max(table.configs.values(), key=lambda c: c.tasks_per_hour)
    walls = [float(r["wall_s"]) for r in table.data["runs"]]
    return {
        "data": _rel(data),
        "configs": len(table.configs),
        "space": space_words(table),
        "machine": table.data.get("machine"),
        "run_s": [round(min(walls)), round(max(walls))] if walls else None,
        "runs": len(table.data["runs"]),
        "cost_min": round(table.grid_cost_s() / 60, 1),
        "best_tasks_per_hour": round(best.tasks_per_hour),
        "near_best": sum(table.near_best(c.key) for c in table.configs.values()),
        "knobs": knob_effects(table),
        "knob_ab": knob_ab_lines(),
        "repeat_cv": repeat_cv(table),
        "seeds": seeds,
        "took_s": round(took),
        "partial": table.partial,
        "goal": {"budget": GOAL_BUDGET, "hit": GOAL_HIT, "over_random": GOAL_MARGIN},
    }


# Issue 22's goal: at a quarter of the grid's cost, the export is within 5% of the best in at
# least 90% of seeds, and at least 20 points more often than random search's.
GOAL_BUDGET, GOAL_HIT, GOAL_MARGIN = 0.25, 0.90, 0.20


def _hit(rows: list[dict[str, Any]], search: str, budget: float, slots: int = 1) -> float | None:
    for r in rows:
        if r["search"] == search and r["slots"] == slots:
            return float(r["hit"][f"{budget:.0%}"])
    return None


def verdict_lines(grid: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The goal, and whether each search met it, from the rows (1 slot)."""
    b = GOAL_BUDGET
    rnd = _hit(rows, "random", b)
    if rnd is None:
        return []
    out = [
        "",
        f"Goal at {b:.0%} of the grid's cost (1 slot): >= {GOAL_HIT:.0%} within 5%, and >= "
        f"{GOAL_MARGIN * 100:.0f} points over random search ({rnd:.0%}).",
    ]
    for name in ("tuner", "tuner + screening"):
        hit = _hit(rows, name, b)
        if hit is None:
            continue
        margin = (hit - rnd) * 100
        short = max(0.0, (GOAL_HIT - hit) * 100)
        met_hit = "met" if short == 0 else f"{short:.0f} points short"
        met_margin = (
            "met" if margin >= GOAL_MARGIN * 100 else f"{GOAL_MARGIN * 100 - margin:.0f} short"
        )
        out.append(f"- {name}: {hit:.0%} ({met_hit}), {margin:+.0f} over random ({met_margin}).")
    out += _why_lines(grid, rows)
    return out


def _why_lines(grid: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """Why the hit rate is what it is, from the numbers: how often a perfect pick of the
    finished trials would have exported a near-best config (the ceiling of any export rule),
    how often the export did, the noise it picks under, and how often confirmation fell back
    to the baseline."""
    tuner = next((r for r in rows if r["search"] == "tuner" and r["slots"] == 1), None)
    if tuner is None or tuner.get("reach") is None:
        return []
    b = f"{GOAL_BUDGET:.0%}"
    if "found" in tuner:
        text = (
            f"- Why: by {b} tuner had finished a run of a near-best config in "
            f"{tuner['found'][b]:.0%} of the seeds (the ceiling of any pick) and exported one in "
            f"{tuner['hit'][b]:.0%}"
        )
    else:
        text = (
            f"- Why: in half the seeds tuner had finished a run of a near-best config by "
            f"{tuner['reach']:.0%} of the grid's cost, yet at {b} exported one in "
            f"{tuner['hit'][b]:.0%}"
        )
    fallback = tuner.get("baseline", {}).get(b)
    if fallback:
        text += f" (the baseline in {fallback:.0%})"
    text += ": it picks among single runs"
    cv = grid.get("repeat_cv")
    if cv is not None:
        text += (
            f" whose tasks/h moves {cv:.1%} (CV) between server starts (the repeats ran 1-2 h "
            f"after the first runs: drift included), against a 5% band of {grid['near_best']} "
            "configs"
        )
    out = [text + "."]
    confirm = next((r for r in rows if r["search"] == DEFAULT.name and r["slots"] == 1), None)
    if confirm is not None and "baseline" in confirm:
        out.append(
            f"- {DEFAULT.name} exported the baseline in {confirm['baseline'][b]:.0%} at {b}: a "
            "candidate must beat it beyond the between-run noise on fresh paired runs "
            "(docs/decision-sim.md: false wins at most 5%)."
        )
    return out


def _write(
    path: Path,
    lines: list[str],
    rows: list[dict[str, Any]],
    grid: dict[str, Any],
    verdict: list[str],
) -> dict[str, Any]:
    """The table as Markdown (with the command and the date), and its cells as JSON."""
    command = "python benchmarks/sample_efficiency.py " + " ".join(sys.argv[1:])
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = [
        "# Sample efficiency (written by benchmarks/sample_efficiency.py)",
        "",
        f"`{command.strip()}`, {when}, {os.cpu_count()} cores. Replay of the recorded grid "
        f"({grid['data']}): load shape, answers not graded.",
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*head, *lines]) + "\n")
    doc = {
        "out": _rel(path),
        "command": command.strip(),
        "written": when,
        "header": lines[0],
        "grid": grid,
        "rows": rows,
        "verdict": verdict,
    }
    path.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# ---- the README's section ------------------------------------------------------------------

BEGIN = "<!-- sample-efficiency: written by benchmarks/sample_efficiency.py --readme -->"
END = "<!-- sample-efficiency: end -->"
README_SEARCHES = (
    "tuner",
    "tuner + screening",
    "random",
    "random + screening",
    "grid in order",
    DEFAULT.name,
)


_GLUE = re.compile(r"(\d) (s|min|tasks/h|configs|seeds|points)\b")


def _wrap(text: str) -> list[str]:
    """Lines of at most 100 characters that never split a figure from its unit."""
    glued = _GLUE.sub(lambda m: f"{m.group(1)}\x00{m.group(2)}", text)
    return [x.replace("\x00", " ") for x in textwrap.wrap(glued, 100, break_on_hyphens=False)]


def render_readme(doc: dict[str, Any]) -> str:
    """The README's section (between BEGIN and END) from what a run wrote (its JSON)."""
    grid = doc["grid"]
    # The table is in the Markdown file; the grid's facts (space, knobs, noise) in its JSON.
    src = f"<!-- source: {doc['out']}, {Path(doc['out']).with_suffix('.json').as_posix()} -->"
    budgets = list(doc["rows"][0]["hit"])
    space = (
        f" ({grid['space']}; {grid['runs']} runs of {grid['run_s'][0]}-{grid['run_s'][1]} s each, "
        "repeats included; the space is cut where benchmarks/record_grid.py's docstring says: "
        "each further value of a knob multiplies the hours of recording)"
        if grid.get("space") and grid.get("run_s")
        else ""
    )
    intro = (
        f"Replayed over a grid recorded on the real CPU build (`{doc['command']}`, "
        f"{grid['took_s']} s, no vLLM; replay mode: load shape): {grid['configs']} configs"
        f"{space}, {grid['cost_min']} min to run them all, best "
        f"{grid['best_tasks_per_hour']} tasks/h, "
        f"{grid['near_best']} configs within 5% of it. hit@B: the share of {grid['seeds']} seeds "
        "whose export is within 5% of the best after B of the grid's cost (startup included), "
        'one slot; "+ screening": a candidate stops at a rung when even its optimistic rate '
        "cannot reach the best trial's on the same first tasks."
    )
    out = [
        BEGIN,
        src,
        *_wrap(intro),
        "",
        src,
        "| search | " + " | ".join(f"hit@{b}" for b in budgets) + " | trials (median) |",
        "|---|" + "---|" * len(budgets) + "---|",
    ]
    for name in README_SEARCHES:
        for r in doc["rows"]:
            if r["search"] != name or r["slots"] != 1:
                continue
            cells = []
            for b in budgets:
                cell = f"{r['hit'][b]:.0%}"
                if r.get("cost"):
                    cell += f" (cost {r['cost'][b]:.0%})"
                cells.append(cell)
            out.append(f"| {name} | " + " | ".join(cells) + f" | {r['trials']:.0f} |")
    verdict = " ".join(x.removeprefix("- ") for x in doc["verdict"])
    out += ["", src, *_wrap(verdict)]
    knobs = grid.get("knob_lines")
    if knobs:
        text = "What the memory knobs changed (evidence for the space reductions): " + (
            "; ".join(knobs) + "."
        )
        out += ["", src, *_wrap(text)]
    out.append(END)
    return "\n".join(out)


def write_readme(readme: Path, doc: dict[str, Any]) -> int:
    """Replace the README's section with `render_readme(doc)`; exit 2 if it has none."""
    text = readme.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        print(
            f"{readme}: no section to rewrite; put the lines {BEGIN} and {END} where it goes",
            file=sys.stderr,
        )
        return 2
    readme.write_text(text[:start] + render_readme(doc) + text[end + len(END) :])
    return 0


def _table(
    table: GridTable,
    out: dict[tuple[int, int], list[StudyRun]],
    seeds: int,
    took: float,
    slots: tuple[int, ...] = SLOTS,
) -> tuple[list[str], list[dict[str, Any]]]:
    """The printed lines (a header line, the Markdown table, the time) and the rows as data."""
    lines: list[str] = []
    rows: list[dict[str, Any]] = []
    best = max(table.configs.values(), key=lambda c: c.tasks_per_hour)
    near = [c for c in table.configs.values() if table.near_best(c.key)]
    noise = "learnt from repeat runs" if table.noise.learned else "task bootstrap (no repeats)"
    lines.append(
        f"grid: {len(table.configs)} configs, cost {table.grid_cost_s() / 60:.1f} min; best "
        f"{best.tasks_per_hour:.0f} tasks/h; {len(near)} within 5%; {seeds} seeds; noise "
        f"{noise}; workload {table.preset.workload.mode} mode (load shape, answers not graded)"
    )
    if table.partial:
        kv = table.preset.space.kv_cache_memory_bytes
        lines.append(
            f"PARTIAL: the recording is not finished; replaying the KV cache sizes {kv} only"
        )
    head = " | ".join(f"hit@{b:.0%}" for b in BUDGETS)
    lines.append("")  # Markdown: a table starts after a blank line
    lines.append(f"| search | slots | {head} | reach (median) | trials (median) |")
    lines.append("|---|---|" + "---|" * len(BUDGETS) + "---|---|")
    for i, search in enumerate(SEARCHES_ALL):
        for k in slots:
            runs = out[(i, k)]
            shares, reach = summarize(runs)
            if search.confirm is None:
                cells = " | ".join(f"{s:.0%}" for s in shares)
            else:
                # The answer comes after the confirmation runs: say what it cost in all.
                costs = [statistics.median(x.spent[j] for x in runs) for j in range(len(BUDGETS))]
                cells = " | ".join(
                    f"{s:.0%} (cost {c:.0%})" for s, c in zip(shares, costs, strict=True)
                )
            r = f"{reach:.0%}" if reach is not None else "-"
            n = statistics.median(x.trials for x in runs)
            lines.append(f"| {search.name} | {k} | {cells} | {r} | {n:.0f} |")
            row: dict[str, Any] = {
                "search": search.name,
                "slots": k,
                "hit": dict(zip([f"{x:.0%}" for x in BUDGETS], shares, strict=True)),
                "reach": reach,
                "trials": n,
            }
            if search.confirm is not None:
                row["cost"] = dict(zip([f"{x:.0%}" for x in BUDGETS], costs, strict=True))
            for field in ("baseline", "found"):
                if (got := _shares(runs, field)) is not None:
                    row[field] = dict(zip([f"{x:.0%}" for x in BUDGETS], got, strict=True))
            rows.append(row)
    lines.append(f"({took:.0f} s)")
    return lines, rows


if __name__ == "__main__":
    raise SystemExit(main())
