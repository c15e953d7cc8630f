"""`optimize()` and `run_waiting()`: check everything, then run the study loop on Ray.

Lifecycle of `optimize()`:

1. Check the inputs and build the model (a bad preset, model or Ray address is one clear
   error, and nothing has been written to the database yet).
2. Start Ray: a private local instance (its own temp dir and ports, so two studies on one
   machine run side by side), or join `--ray-address` after checking it answers.
3. Open the storage (migrating tuner's tables) and create or load the study, with Optuna's
   RDB heartbeat so several drivers can share it (`tuner.study.search.resume`).
4. Reap vLLM servers orphaned on this host by a killed run.
5. Run `tuner.study.search.loop.StudyLoop` on a `RayBackend` (one worker actor per GPU slot).
6. On Ctrl-C/SIGTERM: from the signal on, nothing a trial returns is stored (`SizingBackend`
   holds it back, a calibration included); say in one line what stops (the running trials,
   re-queued as interrupted) and the command that resumes; abort them (`RayBackend.abort`:
   each worker stops its server at once, whether it is starting, calibrating, warming up,
   scoring, probing or benchmarking), leave no server, raise `StudyInterrupted` (the CLI exits
   130, for SIGTERM too), all within 10 s of the signal. A second Ctrl-C quits at once
   (`quit_now`): it kills this run's server groups and every process this one started, and
   exits 130.

Ray's start and stop are in `tuner.study.search.ray_session`, the signals' handling in
`tuner.study.search.interrupts`, the backend wrapper in `tuner.study.search.sizing_backend`,
the options a run is given (`OptimizeOptions`, `loop_settings`) in `tuner.study.search.options`
and what it returns (`StudySummary`) in `tuner.study.search.summary`.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from tuner import __version__
from tuner.attrs import StudyAttr, TrialAttr
from tuner.errors import ConfigError, StudyError
from tuner.models import MODEL_NAMES, prepare
from tuner.server import ServerSpec, reap_orphans
from tuner.storage import Store, normalize_url
from tuner.study.preflight.plan import (
    UNREAD,
    StoredStudy,
    StudyPlan,
    Unread,
    WorkloadSizing,
    plan_study,
    read_stored_study,
    same_scores,
)
from tuner.study.preflight.plan import reduce_space as _reduce_space
from tuner.study.search.display import SlotView, StudyDisplay
from tuner.study.search.interrupts import (
    Interrupted,
    quit_now,
    raise_interrupt,
    say_interrupted,
    stop_loop,
    stop_my_servers,
)
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import RequestFactory
from tuner.study.search.options import OptimizeOptions, loop_settings
from tuner.study.search.ray_session import check_ray_address, start_ray, stop_ray
from tuner.study.search.resume import heartbeat_storage
from tuner.study.search.sizing_backend import SizingBackend
from tuner.study.search.summary import StudySummary, summarize
from tuner.study.space import Preset
from tuner.study.trial.request import ThroughputPlan, TrialRequest

__all__ = [
    "StudyInterrupted",
    "apply_overrides",
    "open_study",
    "optimize",
    "request_factory",
    "resolve_model",
    "run_waiting",
]


class StudyInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the study; its one line (what stopped, how to resume) is said."""


def open_study(preset: Preset, options: OptimizeOptions) -> optuna.Study:
    """Create or load the study on the storage, checking it was made with the same preset."""
    name = options.study_name or preset.study_name
    study = optuna.create_study(
        storage=heartbeat_storage(normalize_url(options.storage_url)),
        study_name=name,
        direction="maximize",
        # Every trial is queued with all its params (tuner.study.search.sampling proposes them from
        # a view of the search's own trials), so the study's sampler only serves a queue that
        # another driver emptied first: a uniform draw, still duplicate-checked.
        sampler=optuna.samplers.RandomSampler(seed=options.seed),
        pruner=optuna.pruners.NopPruner(),  # tuner.study.search.pruning decides, in the loop
        load_if_exists=True,
    )
    preset_json = json.loads(preset.model_dump_json())
    stored = study.user_attrs.get(StudyAttr.PRESET)
    if stored is None:
        study.set_user_attr(StudyAttr.PRESET, preset_json)
        study.set_user_attr(StudyAttr.MODEL, preset.model.name)
        study.set_user_attr(StudyAttr.GPU, preset.gpu.name)
        study.set_user_attr(StudyAttr.TUNER_VERSION, __version__)
    elif not same_scores(stored, preset):
        raise StudyError(
            f"study {name!r} was created with a different preset or workload, so its scores "
            "are not comparable; use the same options or a new --study name"
        )
    return study


def request_factory(
    preset: Preset, *, model_path: str, cache_dir: Path, sizing: WorkloadSizing | None = None
) -> RequestFactory:
    """How the loop turns a trial and its params into a worker's `TrialRequest`.

    `sizing`: the study's workload, read per trial (a pending calibration rides along until
    the first server has chosen); None: the preset's workload.
    """
    plan = ThroughputPlan(
        streams=preset.throughput_streams,
        requests=preset.throughput_requests,
        output_tokens=preset.throughput_output_tokens,
    )
    tokenizer = model_path if Path(model_path).is_dir() else None

    def make(trial: optuna.Trial, params: dict[str, Any]) -> TrialRequest:
        spec = apply_overrides(
            preset.server_spec(params, model_path=model_path),
            trial.user_attrs.get(TrialAttr.SPEC_OVERRIDES) or {},
        )
        # An emulated card (gpu.emulate_memory_gib): keep both fractions beside the params.
        if sizing is not None and sizing.pending is not None:
            sizing.adopt_stored(trial.study)  # another driver's first server may have chosen
        emulation = preset.emulation_record(params)
        if emulation is not None:
            trial.set_user_attr(TrialAttr.GPU_EMULATION, emulation)
        return TrialRequest(
            study_name=trial.study.study_name,
            trial_number=trial.number,
            params=params,
            spec=spec,
            workload=sizing.workload if sizing is not None else preset.workload,
            sizing=sizing.pending if sizing is not None else None,
            cache_dir=str(cache_dir),
            startup_timeout_s=preset.startup_timeout_s,
            throughput=plan,
            tokenizer=tokenizer,
        )

    return make


def resolve_model(preset: Preset, cache_dir: Path, say: Callable[[str], None] | None = None) -> str:
    """What `vllm serve` loads for the preset: a test model built into the cache (said on
    `say`, else stderr, while it builds), else the preset's checkpoint."""
    if preset.model.prepare:
        if preset.model.prepare not in MODEL_NAMES:
            raise ConfigError(f"preset names unknown test model {preset.model.prepare!r}")
        return str(prepare(preset.model.prepare, cache_dir, say=say or _stderr))
    return preset.model.checkpoint


def optimize(
    preset: Preset, options: OptimizeOptions, *, stored: StoredStudy | Unread | None = UNREAD
) -> StudySummary:
    """Run the study until this run's `n_trials` trials that started a server have finished.

    A run that ended early (killed, interrupted, timed out) is continued to its target instead.
    `stored`: the study as `read_stored_study` read it at the start of the caller's command
    (`tuner.study.pipeline.run_study`), so the plan does not read it again; `UNREAD`: read here.
    """
    return _run(preset, options, budgeted=True, stored=stored)


def run_waiting(preset: Preset, options: OptimizeOptions) -> StudySummary:
    """Run the study's queued (WAITING) trials only, e.g. controls or confirmations."""
    return _run(preset, options, budgeted=False)


def _run(
    preset: Preset,
    options: OptimizeOptions,
    *,
    budgeted: bool,
    stored: StoredStudy | Unread | None = UNREAD,
) -> StudySummary:
    import ray

    from tuner.study.trial.workers import RayBackend

    # The live display and the summary say what Optuna's per-trial INFO lines would.
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    joined = options.ray_address is not None and not ray.is_initialized()
    # A socket connect: seconds, before the slower checks below. Ray already up (the caller's,
    # e.g. tuner.study.pipeline's for the whole command) has nothing left to check.
    if options.ray_address and joined:
        check_ray_address(options.ray_address)
    # One step: vLLM's knobs, the model, the space for the workload and the workload's sizing.
    plan = study_plan(preset, options, budgeted=budgeted, stored=stored)
    preset, model_path = plan.preset, plan.model_path
    ray_tmp = start_ray(options.ray_address, checked=True)
    backend: SizingBackend | None = None
    store: Store | None = None
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    previous_int = signal.getsignal(signal.SIGINT)
    try:
        store = Store(options.storage_url)
        study = open_study(preset, options)
        study.set_user_attr(StudyAttr.SPACE_REDUCTIONS, list(plan.reductions))
        plan.start.record(study)
        plan.sizing.store_decision(study)
        backend = SizingBackend(
            RayBackend(
                slots=options.slots or preset.gpu.slots, gpus_per_slot=preset.gpu.gpus_per_slot
            ),
            study,
            plan.sizing,
            options.progress.say if options.progress is not None else _stderr,
        )
        display = StudyDisplay(
            total=0,
            study_name=study.study_name,
            enabled=options.show_progress,
            slots=[SlotView() for _ in range(backend.slots)],
            lines=options.progress,
        )
        loop = StudyLoop(
            study,
            preset,
            backend,
            request_factory(
                preset, model_path=model_path, cache_dir=options.cache_dir, sizing=plan.sizing
            ),
            loop_settings(options, budgeted=budgeted, preset=preset),
            store=store,
            display=display,
        )
        signal.signal(signal.SIGTERM, stop_loop(loop, backend))
        signal.signal(signal.SIGINT, stop_loop(loop, backend))
        try:
            with display:
                outcome = loop.run()
        except (KeyboardInterrupt, Interrupted):
            backend.interrupted = True
            say_interrupted(loop, options.resume_command)
            signal.signal(signal.SIGINT, quit_now(options.cache_dir))
            # Every running trial stops now, in whatever phase; the loop marks them
            # interrupted and queues them again once they are back (seconds, not a task).
            backend.abort()
            loop.abandon()
            stop_my_servers(options.cache_dir)
            raise StudyInterrupted() from None
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
        if backend is not None:
            backend.close()
        # Each trial's Launcher reaps what earlier runs left before it starts a server; the
        # servers of workers that were just stopped are orphans only the driver is left to reap.
        reap_orphans(options.cache_dir / "run")
        if store is not None:
            store.close()
        if ray_tmp is not None or joined:
            stop_ray(ray_tmp)
    return summarize(study, outcome)


def study_plan(
    preset: Preset,
    options: OptimizeOptions,
    *,
    budgeted: bool = True,
    stored: StoredStudy | Unread | None = UNREAD,
) -> StudyPlan:
    """The study's plan for a run of `options` (`tuner.study.preflight.plan.plan_study`).

    A run of queued extras only (`budgeted=False`: confirmation, controls) says nothing about
    the space or the sizing (the search said it) and never calibrates: it runs the study's.
    `stored`: the study as read at the start of the command (`UNREAD`: the plan reads it).
    """
    return plan_study(
        preset,
        storage_url=options.storage_url,
        study_name=options.study_name,
        cache_dir=options.cache_dir,
        model_path=lambda p: resolve_model(
            p, options.cache_dir, options.progress.say if options.progress is not None else None
        ),
        full_space=options.full_space,
        calibrate=options.calibrate,
        may_calibrate=budgeted,
        quiet=not budgeted,
        stored=stored,
    )


def reduce_space(
    preset: Preset,
    options: OptimizeOptions,
    model_path: str,
    say: Callable[[str], None] | None = None,
) -> tuple[Preset, list[str]]:
    """The space cut to what can matter for the workload, and one line per cut (also said).

    `--full-space` keeps the preset as written; so does a study that already searched the full
    space (its stored preset is the unreduced one), so resuming it stays comparable.
    """
    stored = read_stored_study(options.storage_url, options.study_name or preset.study_name)
    return _reduce_space(
        preset,
        model_path=model_path,
        full_space=options.full_space,
        stored=stored,
        say=say or _stderr,
    )


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def apply_overrides(spec: ServerSpec, overrides: dict[str, Any]) -> ServerSpec:
    """A control's changes to the server a params set describes (e.g. a KV cache cut)."""
    if not overrides:
        return spec
    overrides = dict(overrides)
    speculative = overrides.pop("speculative", None)
    if speculative and spec.speculative is not None:
        overrides["speculative"] = spec.speculative.model_copy(update=speculative)
    return spec.replace(**overrides)
