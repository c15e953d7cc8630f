"""`tuner optimize`: run or resume a study for a model and GPU preset, then confirm its winners.

`tuner confirm` runs (or finishes) the confirmation stage alone, on a study already searched.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import typer
from rich.table import Table

from tuner.cli._app import CacheDirOption, StorageOption, app, console
from tuner.cli._checks import budget_seconds
from tuner.cli._checks import cache_dir as checked_cache
from tuner.cli._checks import storage_url as checked_storage
from tuner.cli._study import StudyOption, pick_study
from tuner.defaults import CONFIRM_K, CONFIRM_ROUNDS

_CONFIRM_HELP = (
    "K,R: after the search, re-run the top K candidates and the baseline, interleaved, fresh "
    "server starts, round by round until the verdict is decided or R rounds; 0 skips it. "
    f"Default: the preset's confirm, else {CONFIRM_K},{CONFIRM_ROUNDS}."
)
ConfirmOption = Annotated[str | None, typer.Option("--confirm", help=_CONFIRM_HELP)]
# Trials of a run without --budget (with it, the budget's plan decides and --n-trials caps it).
DEFAULT_N_TRIALS = 20


@app.command("optimize")
def optimize_cmd(
    model: Annotated[str | None, typer.Option("--model", help="Model preset name.")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU preset name (cpu here).")] = None,
    space: Annotated[
        Path | None, typer.Option("--space", help="A preset YAML file instead of --model/--gpu.")
    ] = None,
    storage: StorageOption = None,
    study: Annotated[
        str | None, typer.Option("--study", help="Study name (default: MODEL-GPU).")
    ] = None,
    n_trials: Annotated[
        int | None,
        typer.Option(
            "--n-trials",
            min=1,
            help=f"Trials that start a server, this run. Default {DEFAULT_N_TRIALS}; with "
            "--budget, the budget's plan, capped by this.",
        ),
    ] = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            help="Time for this command, e.g. 20m, 2h, 1h30m: a plan splits it into search "
            "trials and confirmation rounds from the measured cost of a run (revised after "
            "each run), and the command ends with its verdict inside it.",
        ),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=1, help="Stop starting trials after S seconds.")
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster address (default: local).")
    ] = None,
    mode: Annotated[
        str | None, typer.Option("--mode", help="Workload mode: live or replay.")
    ] = None,
    tasks: Annotated[
        int | None, typer.Option("--tasks", min=1, help="Override the preset's scored task count.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampler seed.")] = 0,
    cache_dir: CacheDirOption = None,
    confirm: ConfirmOption = None,
    also_try: Annotated[
        str | None,
        typer.Option(
            "--also-try",
            help="'baseline': also enter the baseline's config as a candidate (an A/A check: "
            "an identical copy must not beat the baseline).",
        ),
    ] = None,
    baseline_every: Annotated[
        int,
        typer.Option(
            "--baseline-every",
            min=0,
            help="Start the baseline again after every K trials of the search (not counted in "
            "--n-trials): search-time scores become ratios to its drift-corrected rate, and its "
            "repeats update the between-run noise. 0: never. Default 5 (docs/decisions.md).",
        ),
    ] = 5,
    screening: Annotated[
        bool | None,
        typer.Option(
            "--screening/--no-screening",
            help="Stop a candidate after 1/4 or 1/2 of its tasks when it cannot beat the best "
            "so far. Default: the preset's `screening` (on where the recorded grid shows it "
            "pays: docs/decisions.md).",
        ),
    ] = None,
    slots: Annotated[
        int | None,
        typer.Option(
            "--slots",
            min=1,
            help="Servers at once, each on one slot: gpu.tensor_parallel_size GPUs of one Ray "
            "node (CPU presets: one 'tuner_cpu_slot' of a node). Default: the preset's "
            "gpu.count / tensor_parallel_size; checked against the cluster.",
        ),
    ] = None,
    full_space: Annotated[
        bool,
        typer.Option(
            "--full-space",
            help="Search every value of the preset's space, also those the workload cannot use "
            "(max_num_seqs above its requests in flight, KV cache beyond its contexts).",
        ),
    ] = False,
    no_calibrate: Annotated[
        bool,
        typer.Option(
            "--no-calibrate",
            help="Keep the preset's workload size. By default a CPU preset's first server "
            "measures prefill and decode tokens/s and scales contexts, then tasks, down until "
            "the scored window fits the preset's target_window_s (120 s); the study keeps "
            "that sizing.",
        ),
    ] = False,
) -> None:
    """Search speculative-decoding configs by successful agent tasks per hour (resumable)."""
    started = time.monotonic()  # the budget counts this command's time, from here
    # The cheap checks first: a bad --budget, --storage or --cache-dir fails here, before Ray.
    budget_s = budget_seconds(budget) if budget is not None else None
    url = checked_storage(storage)
    cache = checked_cache(cache_dir)
    # Imported here: Ray and vLLM-side modules cost seconds, which other commands need not pay.
    from tuner.results.configs import describe_config_short
    from tuner.results.words import tph_label
    from tuner.study import load_preset, optimize
    from tuner.study.stages.confirm_plan import ConfirmPlan, parse_confirm

    preset = load_preset(model=model, gpu=gpu, space=space)
    # --confirm, else the preset's `confirm`, else the hardware's default; fails before any start
    plan = parse_confirm(confirm) if confirm else ConfirmPlan.for_preset(preset)
    if also_try not in (None, "baseline"):
        raise typer.BadParameter("the only value is baseline", param_hint="--also-try")
    overrides: dict[str, object] = {}
    if mode is not None:
        if mode not in ("live", "replay"):
            raise typer.BadParameter("must be live or replay", param_hint="--mode")
        overrides["mode"] = mode
    if tasks is not None:
        overrides["tasks"] = tasks
    if overrides:
        preset = preset.model_copy(
            update={"workload": preset.workload.model_copy(update=overrides)}
        )
    planned = None
    if budget is not None and budget_s is not None:
        planned = _budget(
            url, study, preset, plan, budget, budget_s, started,
            n_trials=n_trials, baseline_every=baseline_every, slots=slots,
            calibrate=not no_calibrate,
        )  # fmt: skip
        first = planned.plan()
        n_trials = first.trials if first is not None else planned.slots
    n_trials = n_trials if n_trials is not None else DEFAULT_N_TRIALS
    options = _options(
        url,
        cache,
        study,
        budget=planned,
        n_trials=n_trials,
        timeout_s=timeout,
        ray_address=ray_address,
        seed=seed,
        also_try_baseline=also_try == "baseline",
        baseline_every=baseline_every,
        screening=screening,
        full_space=full_space,
        calibrate=not no_calibrate,
        slots=slots,
    )
    if ray_address:  # a socket connect: one line within seconds, before anything is printed
        from tuner.study.search.ray_session import check_ray_address

        check_ray_address(ray_address)
    from tuner.storage import masked

    console.print(f"study {options.study_name or preset.study_name} on {masked(url)}")
    _announce(options, preset, plan, n_trials)
    # One local Ray for the search and the confirmation stage: each would otherwise start and
    # stop its own in this process. In one CPU run, the confirmation's first run was
    # interrupted just after the search's Ray had shut down (the next run resumed it).
    with _interrupt_exits(), _one_ray(ray_address):
        from tuner.study.search.ray_session import cluster_slots

        # What the cluster offers, before anything is written (one line, exit 2, if short).
        cluster_slots(slots, preset.gpu, ray_address or "this machine (local)")
        summary = optimize(preset, options)
        table = Table(title=f"study {summary.study_name}")
        table.add_column("finished trials")
        table.add_column("states")
        table.add_column("best")
        best = (
            f"trial {summary.best_number}: {summary.best_value:.1f} "
            f"{tph_label('traces' if preset.workload.traces else preset.workload.mode)} "
            f"({describe_config_short(summary.best_params)})"
            if summary.best_number is not None
            else "none yet"
        )
        states = ", ".join(f"{k.lower()} {v}" for k, v in sorted(summary.states.items()))
        table.add_row(str(summary.finished), states, best)
        console.print(table)
        if summary.recovered:
            console.print(f"re-queued interrupted trials: {list(summary.recovered)}")
        if summary.note:  # e.g. the space is exhausted, or an unfinished run was continued
            console.print(summary.note)
        _confirm_and_print(replace(options, study_name=summary.study_name), plan, preset)
        if preset.load_sweep:  # only when the preset asks: the sweep restarts every finalist
            from tuner.cli.sweep import sweep_after_optimize

            sweep_after_optimize(url, options.cache_dir, summary.study_name, preset.load_sweep)
        _publish(url, summary.study_name)
        console.print("next: tuner export (best vllm serve command), tuner report, tuner dashboard")


def _budget(
    url: str,
    study: str | None,
    preset: Any,
    plan: Any,
    text: str,
    seconds: float,
    started: float,
    *,
    n_trials: int | None,
    baseline_every: int,
    slots: int | None,
    calibrate: bool,
) -> Any:
    """The command's `Budget` (tuner.study.search.budget); a budget that cannot buy a
    baseline and one candidate is refused in one line, before anything is written."""
    from tuner.cli._checks import sqlite_path
    from tuner.errors import ConfigError
    from tuner.study.preflight.plan import read_stored_study
    from tuner.study.search.budget import END_RESERVE_S, GAP_S, Budget
    from tuner.study.search.estimate import planned_run_s
    from tuner.study.search.sampling import enumerate_space
    from tuner.study.stages.confirm import floor_start_needed

    # A SQLite file not there yet has no study, and reading it would create it: a budget
    # refused below must leave nothing written.
    path = sqlite_path(url)
    new = path is not None and not path.exists()
    stored = None if new else read_stored_study(url, study or preset.study_name)
    sizing = _sizing(SimpleNamespace(calibrate=calibrate), preset, stored)
    first = planned_run_s(preset, **sizing)
    configs = enumerate_space(preset)
    budget = Budget(
        budget_s=seconds,
        text=text,
        k=plan.k if plan.enabled else 0,
        rounds=plan.rounds if plan.enabled else 0,
        floor=floor_start_needed(preset),
        baseline_every=baseline_every,
        estimate_s=first[0] if first else None,
        estimate_source=first[1] if first else "no recorded run of this model on this GPU",
        trials_cap=n_trials,
        slots=slots or preset.gpu.slots,
        start=started,
        space_size=len(configs) if configs is not None else None,
    )
    runs = budget.plan()
    if runs is not None and first is not None and runs.runs < 2:
        least = 2 * (first[0] + GAP_S) + END_RESERVE_S
        raise ConfigError(
            f"--budget {text} buys {runs.runs} server run(s) of this preset at about "
            f"{first[0]:.0f} s a run ({first[1]}); a study needs the baseline and a candidate: "
            f"give at least {math.ceil(least / 60)}m"
        )
    return budget


def _confirm_and_print(options: Any, plan: Any, preset: Any) -> None:
    from tuner.study.stages.confirm import confirm_study, floor_start_needed

    if options.budget is not None:
        pass  # the stage says what the budget's time left buys, once the search is over
    elif plan.enabled:
        console.print(
            f"confirmation: the top {plan.k} candidates (or fewer) and the baseline, up to "
            f"{plan.rounds} more fresh starts each, interleaved in alternating order, stopping "
            "once the "
            f"verdict is decided (first look after {plan.first_look}; the baseline's first "
            "start is the correctness floor)"
        )
    elif preset is None or floor_start_needed(preset):
        console.print(
            "no confirmation; one more start of the baseline for the correctness floor "
            "(export will say unconfirmed)"
        )
    result = confirm_study(options, plan, say=console.print)
    if not plan.enabled or len(result.configs) < 2:
        return
    table = Table(title="confirmation (paired with the baseline, round by round)")
    for column in ("trial", "config", "search tasks/h", "confirmed tasks/h", "paired", "outputs"):
        table.add_column(column)
    for number, v in result.verdicts.items():
        failed = v.get("failed_confirmation_starts") or []
        if failed:
            console.print(f"#{number}: a confirmation start failed, not exported: {failed[0]}")
        if not v["confirmation_runs"]:
            continue
        table.add_row(
            f"#{number}",
            v["config"],
            _num(v["search_tasks_per_hour"]),
            _num(v["confirmed_tasks_per_hour"]),
            v["paired_vs_baseline"] or "not paired",
            v["correctness"],
        )
    console.print(table)


def _publish(url: str, study: str) -> None:
    """The answer into optuna-dashboard: the study's note and the report's plots as artifacts."""
    from tuner.errors import TunerError
    from tuner.results.dashboard import artifact_dir, publish_answer

    try:
        plots = publish_answer(url, study)
    except (OSError, TunerError) as exc:  # the study is stored; only its note is missing
        console.print(
            f"the dashboard note was not written ({exc}); `tuner dashboard` writes it at start",
            markup=False,
        )
        return
    console.print(
        f"dashboard: the recommendation is study {study}'s note, with {len(plots)} plots "
        f"attached (stored in {artifact_dir(url)}); see it with `tuner dashboard`",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _announce(options: Any, preset: Any, plan: Any, n_trials: int) -> None:
    """The workload and the time estimate, as plain progress lines (none on a terminal), and
    the confirmation runs the ETA counts on (`planned_runs`: a new study's finalists are at
    most its `n_trials - 1` candidates)."""
    from tuner.study.preflight.plan import read_stored_study
    from tuner.study.search.estimate import estimate_line, planned_runs
    from tuner.study.search.progress import workload_line

    budget = getattr(options, "budget", None)
    if budget is not None:
        line = budget.plan_line()
        (options.progress.say if options.progress is not None else console.print)(line)
    if options.progress is None:
        return
    stored = read_stored_study(options.storage_url, options.study_name or preset.study_name)
    from tuner.study.stages.confirm import floor_start_needed

    first = budget.plan() if budget is not None else None
    if first is not None:
        options.progress.say(workload_line(preset))
        options.progress.say(
            estimate_line(
                preset,
                first.trials,
                first.confirm_runs,
                reruns=first.reruns,
                **_sizing(options, preset, stored),
            )
        )
        options.progress.later_runs = first.confirm_runs
        options.progress.confirm_cap = first.rounds or None
        return
    reruns, confirm = planned_runs(
        n_trials,
        k=plan.k,
        rounds=plan.rounds,
        confirm=plan.enabled,
        baseline_every=options.baseline_every,
        candidates=n_trials - 1 if stored is None else None,
        floor=floor_start_needed(preset),
    )
    options.progress.say(workload_line(preset))
    options.progress.say(
        estimate_line(preset, n_trials, confirm, reruns=reruns, **_sizing(options, preset, stored))
    )
    options.progress.later_runs = confirm
    options.progress.confirm_cap = plan.rounds if plan.enabled else None


def _sizing(options: Any, preset: Any, stored: Any) -> dict[str, Any]:
    """What the estimate knows of the study's sizing (`stored`: `read_stored_study`'s): its
    calibration, or the window the first server will size the workload to
    (`tuner.study.preflight.plan`)."""
    if stored is not None and stored.calibration is not None:
        return {"calibration": stored.calibration}
    fresh = stored is None or (stored.sizing_off is None and not stored.measured)
    if fresh and getattr(options, "calibrate", False) and preset.window_s is not None:
        return {"window_s": preset.window_s}
    return {}


def _options(url: str, cache: Path, study: str | None, **search: Any) -> Any:
    """The study's OptimizeOptions, with its progress: the live table on a terminal, one plain
    flushed line per event anywhere else."""
    from tuner.study import OptimizeOptions
    from tuner.study.search.progress import ProgressLines

    if sys.stdout.isatty() and sys.stderr.isatty():
        show_progress, progress = True, None
    else:
        show_progress, progress = False, ProgressLines()
    return OptimizeOptions(
        storage_url=url,
        cache_dir=cache,
        study_name=study,
        show_progress=show_progress,
        progress=progress,
        resume_command=_this_command(),
        **search,
    )


def _this_command() -> str:
    """The command line that ran this process, as a user would type it again."""
    program = sys.argv[0] if Path(sys.argv[0]).name == "tuner" else "tuner"
    return shlex.join([program, *sys.argv[1:]])


@contextmanager
def _interrupt_exits() -> Iterator[None]:
    """Ctrl-C: exit 130 with one line. The study's own line (what stopped, the command that
    resumes: tuner.study.search.driver) is said already; before or between its stages, this
    says the command that resumes."""
    from tuner.study.search.driver import StudyInterrupted

    try:
        yield
    except StudyInterrupted:
        raise typer.Exit(130) from None
    except KeyboardInterrupt:
        print(f"interrupted; resume with: {_this_command()}", file=sys.stderr, flush=True)
        raise typer.Exit(130) from None


def _num(value: float | None) -> str:
    return "not measured" if value is None else f"{value:,.0f}"


@app.command("confirm")
def confirm_cmd(
    study: StudyOption = None,
    storage: StorageOption = None,
    confirm: ConfirmOption = None,
    cache_dir: CacheDirOption = None,
) -> None:
    """Re-run a finished study's top candidates and baseline, interleaved; export decides on it."""
    url = checked_storage(storage, must_exist=True)
    cache = checked_cache(cache_dir)
    from tuner.study.stages.confirm_plan import DEFAULT_CONFIRM, ConfirmPlan, parse_confirm

    plan = parse_confirm(confirm) if confirm else None
    study = pick_study(url, study)
    stored = _stored_preset(url, study)  # no such study: one line, before anything is printed
    if plan is None:
        plan = ConfirmPlan.for_preset(stored) if stored is not None else DEFAULT_CONFIRM
    options = _options(url, cache, study)
    if stored is not None and plan.enabled:
        _announce(options, stored, plan, 0)
    with _interrupt_exits():
        _confirm_and_print(options, plan, stored)
    _publish(options.storage_url, study)
    console.print("next: tuner export (decides on the confirmation rounds), tuner report")


def _stored_preset(url: str, study: str) -> Any:
    """The preset the study was searched with (None: none stored); StudyError: no such study."""
    import optuna
    from pydantic import ValidationError

    from tuner.attrs import StudyAttr
    from tuner.errors import StudyError
    from tuner.results.study_reader import open_optuna_storage
    from tuner.storage import masked
    from tuner.study.space import Preset

    try:
        loaded = optuna.load_study(study_name=study, storage=open_optuna_storage(url))
    except KeyError:
        raise StudyError(f"no study named {study!r} in {masked(url)}") from None
    try:
        return Preset.model_validate(loaded.user_attrs.get(StudyAttr.PRESET) or {})
    except ValidationError:
        return None


@contextmanager
def _one_ray(address: str | None) -> Iterator[None]:
    """Ray for the whole command: a local instance, or the cluster at `address`, joined once."""
    import ray

    from tuner.study.search.ray_session import start_ray, stop_ray

    if ray.is_initialized():
        yield
        return
    # The driver's own start of a local instance: its private temp dir; None when joining.
    tmp = start_ray(address)
    try:
        yield
    finally:
        stop_ray(tmp)
