"""`tuner optimize`: run or resume a study for a model and GPU preset, then confirm its winners.

`tuner confirm` runs (or finishes) the confirmation stage alone, on a study already searched.
Both parse and check their options, call the library (`tuner.study.pipeline`: `run_study`,
`run_confirm`) and print what it hands back: its lines as they come, its tables as each part
ends (`StudyHooks`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli._app import CacheDirOption, StorageOption, app, console
from tuner.cli._checks import budget_seconds
from tuner.cli._checks import cache_dir as checked_cache
from tuner.cli._checks import storage_url as checked_storage
from tuner.cli._run import interrupt_exits, study_hooks, study_options
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
    from tuner.study import load_preset
    from tuner.study.pipeline import run_study
    from tuner.study.stages.confirm_plan import parse_confirm

    preset = load_preset(model=model, gpu=gpu, space=space)
    # --confirm (else the preset's, which run_study takes): a bad one fails before any start.
    plan = parse_confirm(confirm) if confirm else None
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
    options = study_options(
        url, cache, study, n_trials=DEFAULT_N_TRIALS, timeout_s=timeout, ray_address=ray_address,
        seed=seed, also_try_baseline=also_try == "baseline", baseline_every=baseline_every,
        screening=screening, full_space=full_space, calibrate=not no_calibrate, slots=slots,
    )  # fmt: skip
    with interrupt_exits():
        run_study(
            preset, options,
            n_trials=n_trials, budget_s=budget_s, budget_text=budget, confirm=plan,
            say=console.print, hooks=study_hooks(preset), started=started,
        )  # fmt: skip
    console.print("next: tuner export (best vllm serve command), tuner report, tuner dashboard")


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
    from tuner.study.pipeline import run_confirm
    from tuner.study.stages.confirm_plan import parse_confirm

    plan = parse_confirm(confirm) if confirm else None
    study = pick_study(url, study)
    options = study_options(url, cache, study)
    with interrupt_exits():  # no such study: one line, before anything is printed
        run_confirm(study, options, confirm=plan, say=console.print, hooks=study_hooks(None))
    console.print("next: tuner export (decides on the confirmation rounds), tuner report")
