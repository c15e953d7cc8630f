"""`tuner sweep`: the finalists of a study measured at several agent counts.

After the search (and the confirmation rounds, when they ran), the baseline and the top
candidates each get one fresh `vllm serve` on which the agent workload runs at every agent
count in turn, lowest first. Each config is one `TrialRequest` with its `loads`, evaluated as a
search trial is (`tuner.study.trial.evaluate.evaluate` on a Ray worker, through
`tuner.study.stages.sweep_workers.SweepWorkers`): the same start (Ray placement, the Mamba
clamp-and-retry), the same reading of a failed workload and a dead server, the same stop, and
an interrupt that stops the server within seconds. A config whose `max_num_seqs` was clamped
records the command that ran (`SweptConfig.serve_command`) and both starts.
Every load plays its own task set (seed `workload.seed + 1000 x agents`), the same for every
config: configs are compared task by task at one load, and a later load on the same server does
not hit prompts that an earlier one cached. Warm-up tasks run before the first load only.

Each config is stored as soon as it finishes (`tuner.results.load_sweep.LoadSweep` in the study's
user attribute `load_sweep`; its workload runs, with every task and step, in tuner's tables
under the study name + `SWEEP_TABLE_SUFFIX`), so an interrupted sweep resumes with the configs
that are missing. The analysis (winners, crossover, schedule) is `tuner.results.load_sweep`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import optuna
from optuna.trial import FrozenTrial

from tuner.attrs import Role, TrialAttr, is_feasible, role_from
from tuner.errors import StudyError
from tuner.records import WorkloadRecord
from tuner.results import load_results
from tuner.results.decision import study_noise
from tuner.results.load_sweep import SWEEP_ATTR, LoadPoint, LoadSweep, SweptConfig, sweep_from_attrs
from tuner.server import ServerSpec, SpeculativeSpec
from tuner.storage import Store, normalize_url
from tuner.study.search.driver import resolve_model
from tuner.study.space import Preset
from tuner.study.stages.sweep_workers import SweepWorkers
from tuner.study.trial.request import ThroughputPlan, TrialRequest

__all__ = [
    "SWEEP_TABLE_SUFFIX",
    "Finalist",
    "SweepOptions",
    "choose_finalists",
    "default_agents",
    "run_sweep",
    "schedule_finalist",
]

SWEEP_TABLE_SUFFIX: Final = ":load-sweep"
_SEED_STRIDE: Final = 1000


@dataclass(frozen=True)
class Finalist:
    """A config to sweep: a trial's params, or those params with a depth schedule."""

    key: str
    trial_number: int | None
    params: dict[str, Any]
    is_baseline: bool = False
    schedule: tuple[tuple[int, int, int], ...] | None = None


@dataclass(frozen=True)
class SweepOptions:
    """What `tuner sweep` was asked for."""

    storage_url: str
    cache_dir: Path
    study_name: str
    agents: tuple[int, ...] | None = None  # None: the preset's load_sweep, else 1, 2, 4
    top: int = 2
    tasks: int | None = None  # scored tasks per load; None: the preset's
    limit: int | None = None  # measure at most this many configs in this call
    schedule: bool = False  # also sweep the schedule derived from the finalists' sweep
    # A schedule of your own instead of the derived one, on the best speculative finalist's
    # server (its largest depth becomes num_speculative_tokens).
    schedule_given: tuple[tuple[int, int, int], ...] | None = None


def _role(t: FrozenTrial) -> str:
    return role_from(t.user_attrs, t.number)


def choose_finalists(trials: Sequence[FrozenTrial], top: int) -> list[Finalist]:
    """The baseline and the `top` best distinct configs.

    With confirmation runs (role "confirm") the configs they confirmed are ranked by their mean
    confirmed tasks/h; otherwise the search trials by their own value.
    """
    base = next((t for t in trials if _role(t) == Role.BASELINE and is_feasible(t)), None)
    if base is None:
        raise StudyError("the study has no finished baseline trial; run tuner optimize first")
    by_number = {t.number: t for t in trials}
    confirmed: dict[int, list[float]] = {}
    for t in trials:
        of = t.user_attrs.get(TrialAttr.CONFIRM_OF)
        if _role(t) == Role.CONFIRM and is_feasible(t) and isinstance(of, int) and of in by_number:
            confirmed.setdefault(of, []).append(float(t.value or 0.0))
    if any(n != base.number for n in confirmed):
        scored = [(statistics.fmean(v), by_number[n]) for n, v in confirmed.items()]
    else:
        scored = [
            (float(t.value or 0.0), t)
            for t in trials
            if _role(t) == Role.CANDIDATE and is_feasible(t)
        ]
    picked: list[Finalist] = [Finalist(f"#{base.number}", base.number, dict(base.params), True)]
    seen = [base.params]
    for _, t in sorted(scored, key=lambda vt: (-vt[0], vt[1].number)):
        if len(picked) > top:
            break
        if t.params in seen:
            continue
        seen.append(t.params)
        picked.append(Finalist(f"#{t.number}", t.number, dict(t.params)))
    return picked


def default_agents(preset: Preset) -> tuple[int, ...]:
    """The preset's `load_sweep`, else 1, 2, 4 and the preset's own count."""
    declared = tuple(getattr(preset, "load_sweep", ()) or ())
    agents = declared or (1, 2, 4)
    return tuple(sorted({*agents, preset.workload.agents}))


def schedule_finalist(
    sweep: LoadSweep, given: tuple[tuple[int, int, int], ...] | None = None
) -> Finalist | None:
    """A depth schedule as a config to sweep: `given` on the best speculative finalist's
    server, else the one derived from the sweep (`tuner.results.load_sweep.derive_schedule`); None
    when there is none."""
    from tuner.results.load_sweep import derive_schedule

    if given is not None:
        speculative = [c for c in sweep.configs if c.depth > 0 and c.points]
        if not speculative:
            raise StudyError("a depth schedule needs a speculative finalist in the sweep")
        low = min(sweep.agents)
        # A schedule speculates at small batches: the finalist best at the lowest load hosts it.
        host = max(speculative, key=lambda c: (c.at(low) or c.points[0]).tasks_per_hour)
        schedule = given
    else:
        derived = derive_schedule(sweep)
        if derived is None:
            return None
        host, schedule = derived
    params = dict(host.params)
    params["num_speculative_tokens"] = max(depth for _, _, depth in schedule)
    return Finalist("schedule", host.trial_number, params, schedule=schedule)


def _spec(preset: Preset, finalist: Finalist, model_path: str) -> ServerSpec:
    spec = preset.server_spec(finalist.params, model_path=model_path)
    if finalist.schedule is None or spec.speculative is None:
        return spec
    speculative = SpeculativeSpec.model_validate(
        {
            **spec.speculative.model_dump(exclude_defaults=True),
            "num_speculative_tokens_per_batch_size": finalist.schedule,
        }
    )
    return spec.replace(speculative=speculative)


def _label(finalist: Finalist) -> str:
    from tuner.results.configs import describe_config

    text = describe_config(finalist.params)
    if finalist.schedule is not None:
        ranges = ", ".join(
            f"{a}-{b}: {d}" if a != b else f"{a}: {d}" for a, b, d in finalist.schedule
        )
        text = f"{text}, depth by batch size ({ranges})"
    return text


def _point(record: WorkloadRecord, run_id: int | None) -> LoadPoint:
    scored = [t for t in record.task_records if not t.warmup]
    walls = sorted(t.wall_s for t in scored)
    return LoadPoint(
        agents=record.agents,
        tasks=record.tasks,
        successes=record.successes,
        wall_s=record.scored_wall_s,
        tasks_per_hour=record.tasks_per_hour,
        tasks_per_hour_low=record.tasks_per_hour_low,
        tasks_per_hour_high=record.tasks_per_hour_high,
        latency_p50_s=statistics.median(walls) if walls else None,
        latency_p90_s=statistics.quantiles(walls, n=10)[-1] if len(walls) > 1 else None,
        acceptance_rate=record.acceptance_rate,
        outcomes=tuple((t.task_id, t.success, t.wall_s) for t in scored),
        workload_run_id=run_id,
    )


def _request(
    finalist: Finalist,
    *,
    preset: Preset,
    agents: Sequence[int],
    tasks: int,
    model_path: str,
    study_name: str,
    cache_dir: Path,
    index: int,
) -> TrialRequest:
    """The finalist's server with every load to run on it, lowest first.

    Every load plays its own task set (seed stride), warm-up before the first load only: the
    later loads find the server warm already.
    """
    loads = tuple(
        preset.workload.model_copy(
            update={
                "agents": n,
                "tasks": tasks,
                "seed": preset.workload.seed + _SEED_STRIDE * n,
                "warmup_tasks": preset.workload.warmup_tasks if i == 0 else 0,
            }
        )
        for i, n in enumerate(sorted(agents))
    )
    return TrialRequest(
        # The trial's logs go under this name (cache/logs/<study>:load-sweep), as its rows do.
        study_name=study_name + SWEEP_TABLE_SUFFIX,
        trial_number=index,
        params=finalist.params,
        spec=_spec(preset, finalist, model_path),
        workload=loads[0],
        cache_dir=str(cache_dir),
        startup_timeout_s=preset.startup_timeout_s,
        throughput=ThroughputPlan(streams=()),
        tokenizer=model_path if Path(model_path).is_dir() else None,
        loads=loads,
    )


def measure_config(
    finalist: Finalist,
    request: TrialRequest,
    *,
    store: Store,
    workers: SweepWorkers,
    on_state: Callable[[str], None] = lambda _s: None,
) -> SweptConfig:
    """One fresh server for `finalist` on the sweep's worker (`evaluate()`, as a trial's), the
    workload at each of `request.loads`, the server stopped; its rows stored."""
    index = request.trial_number
    label = _label(finalist)
    on_state(f"{finalist.key} {label}: starting a fresh server")
    result = workers.run(request, lambda state: on_state(f"{finalist.key} {label}: {state}"))
    table_key = request.study_name
    start_id = None
    for start in result.server_starts:  # two when Mamba blocks clamped max_num_seqs
        start_id = store.add_server_start(table_key, index, start)
    points = tuple(
        _point(r, store.add_workload_run(table_key, index, r, server_start_id=start_id))
        for r in result.loads
    )
    started = result.server_starts[-1] if result.server_starts else None
    if started is not None and started.failure_kind is not None:
        started = None  # it never served: the failure is its start's
    failure = result.failure_reason
    if failure is not None and started is not None and len(points) < len(request.loads):
        failure = f"at {request.loads[len(points)].agents} agent(s): {failure}"
    return SweptConfig(
        key=finalist.key,
        label=label,
        trial_number=finalist.trial_number,
        params=finalist.params,
        # What ran: the clamped max_num_seqs when Mamba blocks ran short.
        serve_command=result.spec.serve_command(),
        is_baseline=finalist.is_baseline,
        schedule=finalist.schedule,
        kv_cache_tokens=started.facts.kv_cache_tokens if started is not None else None,
        failure=failure,
        points=points,
    )


def _complete(config: SweptConfig | None, agents: Sequence[int]) -> bool:
    if config is None:
        return False
    return config.failure is not None or all(config.at(n) is not None for n in agents)


def run_sweep(
    options: SweepOptions, on_state: Callable[[str], None] = lambda _s: None
) -> LoadSweep:
    """Sweep the study's finalists (and, when asked, the derived schedule); store each config.

    Configs already stored with every requested load are kept; the rest run, at most
    `options.limit` of them in this call.
    """
    storage = normalize_url(options.storage_url)
    try:
        study = optuna.load_study(study_name=options.study_name, storage=storage)
    except KeyError:
        raise StudyError(f"no study named {options.study_name!r} in this storage") from None
    preset = Preset.model_validate(study.user_attrs["preset"])
    agents = tuple(sorted(set(options.agents or default_agents(preset))))
    tasks = options.tasks or preset.workload.tasks
    previous = sweep_from_attrs(study.user_attrs)
    # Each load is one run per config, so its verdicts rest on the between-run noise: the
    # study's (its recorded prior updated by its own baseline starts), as its export uses.
    noise = study_noise(load_results(options.storage_url, options.study_name))
    sweep = LoadSweep(agents, preset.workload.agents, preset.workload.mode, tasks, noise=noise)
    if previous is not None and previous.agents == agents and previous.tasks == tasks:
        sweep = replace(previous, noise=noise)  # resume: same loads, same task count
    finalists = choose_finalists(study.get_trials(deepcopy=False), options.top)
    store = Store(options.storage_url)
    ran = 0
    workers = SweepWorkers(gpus_per_slot=preset.gpu.gpus_per_slot, cache_dir=options.cache_dir)
    try:
        with workers:
            model_path = resolve_model(preset, options.cache_dir, say=on_state)
            for round_ in ("finalists", "schedule"):
                if round_ == "schedule":
                    if not options.schedule and options.schedule_given is None:
                        break
                    derived = schedule_finalist(sweep, options.schedule_given)
                    if derived is None:
                        on_state("no depth schedule: one static config wins at every load")
                        break
                    finalists = [derived]
                for finalist in finalists:
                    existing = next((c for c in sweep.configs if c.key == finalist.key), None)
                    if _complete(existing, agents) and (
                        existing is None or existing.schedule == finalist.schedule
                    ):
                        continue
                    if options.limit is not None and ran >= options.limit:
                        return sweep
                    index = len(sweep.configs)
                    if existing is not None:
                        index = sweep.configs.index(existing)
                    store.delete_trial(study.study_name + SWEEP_TABLE_SUFFIX, index)
                    request = _request(finalist, preset=preset, agents=agents, tasks=tasks,
                                       model_path=model_path, study_name=study.study_name,
                                       cache_dir=options.cache_dir, index=index)  # fmt: skip
                    config = measure_config(
                        finalist, request, store=store, workers=workers, on_state=on_state
                    )
                    ran += 1
                    sweep = sweep.with_config(config)
                    study.set_user_attr(SWEEP_ATTR, sweep.to_json())
    finally:
        store.close()
    return sweep
