"""The study loop: Optuna ask/tell in the driver, trials evaluated on Ray workers.

Lifecycle of `optimize()`:

1. Open the storage (migrating tuner's tables), create or load the study, claim it.
2. Reap vLLM servers orphaned by a killed run; mark its interrupted trials and re-queue them.
3. Enqueue the baseline (no speculation, default memory) as the first trial of a new study.
4. Start Ray (local, or `ray_address`) and one worker actor per GPU slot.
5. Loop: keep every slot busy with `ask()`ed candidates; relay progress to Optuna
   (`report`/`should_prune`) and stop losing trials; `tell()` each result after storing it.
6. On Ctrl-C/SIGTERM: stop the workers' trials, re-queue them as interrupted, leave no server.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import ray
from optuna.trial import TrialState

from tuner import __version__
from tuner.errors import StudyError
from tuner.models import MODEL_NAMES, prepare
from tuner.server import ServerSpec, reap_orphans
from tuner.storage import Store, normalize_url
from tuner.study.attrs import StudyAttr, TrialAttr
from tuner.study.display import SlotView, StudyDisplay, describe_params
from tuner.study.evaluate import ThroughputPlan, TrialRequest, TrialResult
from tuner.study.recording import record_result
from tuner.study.resume import claim_study, finished_count, recover_interrupted
from tuner.study.sampling import make_pruner, make_sampler
from tuner.study.space import Preset
from tuner.study.workers import ProgressHub, start_workers

__all__ = [
    "OptimizeOptions",
    "StudySummary",
    "apply_overrides",
    "open_study",
    "optimize",
    "run_waiting",
]


@dataclass(frozen=True)
class OptimizeOptions:
    """How to run a study (the CLI's options)."""

    storage_url: str
    cache_dir: Path
    study_name: str | None = None
    n_trials: int = 20
    timeout_s: float | None = None
    ray_address: str | None = None
    seed: int | None = 0
    show_progress: bool = True


@dataclass(frozen=True)
class StudySummary:
    """What a finished `optimize()` call leaves behind."""

    study_name: str
    finished: int
    states: dict[str, int]
    best_number: int | None
    best_value: float | None
    best_params: dict[str, Any]
    recovered: tuple[int, ...]


def open_study(preset: Preset, options: OptimizeOptions) -> optuna.Study:
    """Create or load the study on the storage, checking it was made with the same preset."""
    name = options.study_name or preset.study_name
    storage = optuna.storages.RDBStorage(normalize_url(options.storage_url))
    study = optuna.create_study(
        storage=storage,
        study_name=name,
        direction="maximize",
        sampler=make_sampler(options.seed, options.n_trials),
        pruner=make_pruner(preset.workload.tasks),
        load_if_exists=True,
    )
    preset_json = json.loads(preset.model_dump_json())
    stored = study.user_attrs.get(StudyAttr.PRESET)
    if stored is None:
        study.set_user_attr(StudyAttr.PRESET, preset_json)
        study.set_user_attr(StudyAttr.MODEL, preset.model.name)
        study.set_user_attr(StudyAttr.GPU, preset.gpu.name)
        study.set_user_attr(StudyAttr.TUNER_VERSION, __version__)
    elif stored != preset_json:
        raise StudyError(
            f"study {name!r} was created with a different preset or workload, so its scores "
            "are not comparable; use the same options or a new --study name"
        )
    return study


def _model_path(preset: Preset, cache_dir: Path) -> str:
    if preset.model.prepare:
        if preset.model.prepare not in MODEL_NAMES:
            raise StudyError(f"preset names unknown test model {preset.model.prepare!r}")
        return str(prepare(preset.model.prepare, cache_dir))
    return preset.model.checkpoint


def _start_ray(address: str | None) -> None:
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    else:
        ray.init(
            num_cpus=os.cpu_count() or 1,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.WARNING,
        )


class _Interrupted(Exception):
    pass


def _raise_interrupt(_signum: int, _frame: object) -> None:
    raise _Interrupted()


def optimize(preset: Preset, options: OptimizeOptions) -> StudySummary:
    """Run (or resume) the study until it has `n_trials` finished trials or time runs out."""
    return _run(preset, options, budgeted=True)


def run_waiting(preset: Preset, options: OptimizeOptions) -> StudySummary:
    """Run the study's enqueued (WAITING) trials only, e.g. the controls of `tuner explain`."""
    return _run(preset, options, budgeted=False)


def _run(preset: Preset, options: OptimizeOptions, *, budgeted: bool) -> StudySummary:
    # The live display and the summary say what Optuna's per-trial INFO lines would.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = Store(options.storage_url)
    store.engine  # migrate tuner's tables before Optuna touches the database  # noqa: B018
    study = open_study(preset, options)
    claim_study(study)
    reap_orphans(options.cache_dir / "run")
    recovered = recover_interrupted(study, store)
    if budgeted and not study.trials:
        study.enqueue_trial(preset.baseline_params(), user_attrs={TrialAttr.ROLE: "baseline"})
    model_path = _model_path(preset, options.cache_dir)
    _start_ray(options.ray_address)
    slots = preset.gpu.slots
    gpus = 0 if preset.gpu.cpu else preset.gpu.tensor_parallel_size
    hub = ProgressHub.remote()  # type: ignore[attr-defined]
    workers = start_workers(hub, slots=slots, gpus_per_slot=gpus)
    plan = ThroughputPlan(
        streams=preset.throughput_streams,
        requests=preset.throughput_requests,
        output_tokens=preset.throughput_output_tokens,
    )
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    display = StudyDisplay(
        total=options.n_trials if budgeted else len(_waiting(study)),
        study_name=study.study_name,
        enabled=options.show_progress,
        slots=[SlotView() for _ in workers],
    )
    loop = _Loop(study, store, preset, options, model_path, hub, workers, plan, display)
    loop.budgeted = budgeted
    try:
        with display:
            loop.run()
    except (KeyboardInterrupt, _Interrupted):
        loop.abandon()
        raise KeyboardInterrupt() from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        for worker in workers:
            ray.kill(worker)
        ray.kill(hub)
        reap_orphans(options.cache_dir / "run")
        store.close()
    return _summary(study, tuple(recovered))


class _Loop:
    """Keeps every worker busy and relays progress; one instance per `optimize()` call."""

    def __init__(
        self,
        study: optuna.Study,
        store: Store,
        preset: Preset,
        options: OptimizeOptions,
        model_path: str,
        hub: Any,
        workers: list[Any],
        plan: ThroughputPlan,
        display: StudyDisplay,
    ) -> None:
        self.study, self.store, self.preset, self.options = study, store, preset, options
        self.model_path, self.hub, self.workers, self.plan = model_path, hub, workers, plan
        self.display = display
        self.inflight: dict[Any, tuple[int, optuna.Trial]] = {}  # ref -> (slot, trial)
        self.reported: dict[int, int] = {}
        self.deadline = time.monotonic() + options.timeout_s if options.timeout_s else None
        self.budgeted = True

    def _finished(self) -> int:
        return finished_count(self.study.get_trials(deepcopy=False))

    def _may_start(self) -> bool:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return False
        if not self.budgeted:
            return bool(_waiting(self.study))
        return self._finished() + len(self.inflight) < self.options.n_trials

    def run(self) -> None:
        self.display.update(finished=self._finished())
        while True:
            busy = {slot for slot, _ in self.inflight.values()}
            for slot in range(len(self.workers)):
                if slot not in busy and self._may_start():
                    self._dispatch(slot)
            if not self.inflight:
                return
            done, _ = ray.wait(list(self.inflight), num_returns=1, timeout=0.5)
            self._relay_progress()
            for ref in done:
                self._complete(ref)

    def _dispatch(self, slot: int) -> None:
        trial = self.study.ask()
        params = self.preset.suggest(trial)
        if TrialAttr.ROLE not in trial.user_attrs:
            trial.set_user_attr(TrialAttr.ROLE, "candidate")
        duplicate = self._duplicate_of(trial, params)
        if duplicate is not None:
            # The same server and workload again would only re-measure noise; the sampler
            # learns from the pruned duplicate and the budget still moves forward.
            trial.set_user_attr(TrialAttr.DUPLICATE_OF, duplicate)
            self.study.tell(trial, state=TrialState.PRUNED)
            return
        spec = apply_overrides(
            self.preset.server_spec(params, model_path=self.model_path),
            trial.user_attrs.get(TrialAttr.SPEC_OVERRIDES) or {},
        )
        request = TrialRequest(
            study_name=self.study.study_name,
            trial_number=trial.number,
            params=params,
            spec=spec,
            workload=self.preset.workload,
            cache_dir=str(self.options.cache_dir),
            startup_timeout_s=self.preset.startup_timeout_s,
            throughput=self.plan,
            tokenizer=self.model_path if Path(self.model_path).is_dir() else None,
        )
        ref = self.workers[slot].run.remote(request)
        self.inflight[ref] = (slot, trial)
        self.display.slots[slot] = SlotView(
            trial=trial.number, label=describe_params(params), state="starting"
        )
        self.display.update()

    def _duplicate_of(self, trial: optuna.Trial, params: dict[str, Any]) -> int | None:
        if trial.user_attrs.get(TrialAttr.ROLE) != "candidate":
            return None
        for other in self.study.get_trials(deepcopy=False):
            if (
                other.number != trial.number
                and other.params == params
                and other.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
                and other.user_attrs.get(TrialAttr.ROLE) != "control"
                and TrialAttr.DUPLICATE_OF not in other.user_attrs
            ):
                return other.number
        return None

    def _relay_progress(self) -> None:
        progress, states = ray.get(self.hub.snapshot.remote())
        for slot, trial in self.inflight.values():
            view = self.display.slots[slot]
            view.state = states.get(trial.number, view.state)
            p = progress.get(trial.number)
            if not p:
                continue
            view.tasks_done, view.tasks_total = p["tasks_done"], p["tasks_total"]
            view.tasks_per_hour = p["tasks_per_hour"]
            step = int(p["tasks_done"])
            role = trial.user_attrs.get(TrialAttr.ROLE)
            # Controls are measurements asked for by `tuner explain`: they never feed or meet
            # the pruner. The baseline is the reference, so it reports but is never pruned.
            if role == "control" or step <= self.reported.get(trial.number, 0):
                continue
            self.reported[trial.number] = step
            trial.report(float(p["tasks_per_hour"]), step)
            if role == "candidate" and trial.should_prune():
                self.hub.request_stop.remote(trial.number)
                view.state = "pruning"
        self.display.update()

    def _complete(self, ref: Any) -> None:
        slot, trial = self.inflight.pop(ref)
        try:
            result: TrialResult = ray.get(ref)
        except ray.exceptions.RayError as exc:
            trial.set_user_attr(TrialAttr.FAILURE_KIND, "worker_crashed")
            trial.set_user_attr(TrialAttr.FAILURE_REASON, str(exc).splitlines()[0][:500])
            self.study.tell(trial, state=TrialState.FAIL)
            self.workers[slot] = start_workers(
                self.hub,
                slots=1,
                gpus_per_slot=0 if self.preset.gpu.cpu else self.preset.gpu.tensor_parallel_size,
            )[0]
        else:
            record_result(self.study, trial, self.store, result)
        self.hub.forget.remote(trial.number)
        self.display.slots[slot] = SlotView()
        self.display.best = _best_line(self.study)
        self.display.update(finished=self._finished())

    def abandon(self) -> None:
        """Ctrl-C: stop running trials, mark them interrupted and re-queue them."""
        for _slot, trial in self.inflight.values():
            self.hub.request_stop.remote(trial.number)
        if self.inflight:
            # Workers stop their workload at the next task boundary and then their server.
            ray.wait(list(self.inflight), num_returns=len(self.inflight), timeout=60)
        recover_interrupted(self.study, self.store)


def _waiting(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def apply_overrides(spec: ServerSpec, overrides: dict[str, Any]) -> ServerSpec:
    """A control's changes to the server a params set describes (e.g. a KV cache cut)."""
    if not overrides:
        return spec
    overrides = dict(overrides)
    speculative = overrides.pop("speculative", None)
    if speculative and spec.speculative is not None:
        overrides["speculative"] = spec.speculative.model_copy(update=speculative)
    return spec.replace(**overrides)


def _best_line(study: optuna.Study) -> str:
    try:
        best = study.best_trial
    except ValueError:
        return "-"
    return f"trial {best.number}: {best.value:.1f} tasks/h ({describe_params(best.params)})"


def _summary(study: optuna.Study, recovered: tuple[int, ...]) -> StudySummary:
    trials = study.get_trials(deepcopy=False)
    states: dict[str, int] = {}
    for t in trials:
        states[t.state.name] = states.get(t.state.name, 0) + 1
    feasible = [
        t
        for t in trials
        if t.state == TrialState.COMPLETE
        and not t.user_attrs.get(TrialAttr.INFEASIBLE)
        and t.user_attrs.get(TrialAttr.ROLE) != "control"
    ]
    best = max(feasible, key=lambda t: t.value or 0.0, default=None)
    return StudySummary(
        study_name=study.study_name,
        finished=finished_count(trials),
        states=states,
        best_number=best.number if best else None,
        best_value=best.value if best else None,
        best_params=dict(best.params) if best else {},
        recovered=recovered,
    )
