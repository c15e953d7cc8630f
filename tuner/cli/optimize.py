"""`tuner optimize`: run or resume a study for a model and GPU preset."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tuner.cli._app import StorageOption, app, console
from tuner.settings import get_settings
from tuner.storage import masked


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
        int, typer.Option("--n-trials", min=1, help="Finished trials wanted.")
    ] = 20,
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
    cache_dir: Annotated[
        Path | None, typer.Option("--cache-dir", envvar="TUNER_CACHE_DIR", help="Cache directory.")
    ] = None,
) -> None:
    """Search speculative-decoding configs by successful agent tasks per hour (resumable)."""
    # Imported here: Ray and vLLM-side modules cost seconds, which other commands need not pay.
    from tuner.study import OptimizeOptions, load_preset, optimize
    from tuner.study.display import describe_params

    preset = load_preset(model=model, gpu=gpu, space=space)
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
    settings = get_settings()
    url = storage or settings.storage_url()
    options = OptimizeOptions(
        storage_url=url,
        cache_dir=cache_dir or settings.cache_path(),
        study_name=study,
        n_trials=n_trials,
        timeout_s=timeout,
        ray_address=ray_address,
        seed=seed,
        show_progress=sys.stderr.isatty(),
    )
    console.print(f"study {options.study_name or preset.study_name} on {masked(url)}")
    summary = optimize(preset, options)
    table = Table(title=f"study {summary.study_name}")
    table.add_column("finished trials")
    table.add_column("states")
    table.add_column("best")
    best = (
        f"trial {summary.best_number}: {summary.best_value:.1f} tasks/h "
        f"({describe_params(summary.best_params)})"
        if summary.best_number is not None
        else "none yet"
    )
    states = ", ".join(f"{k.lower()} {v}" for k, v in sorted(summary.states.items()))
    table.add_row(str(summary.finished), states, best)
    console.print(table)
    if summary.recovered:
        console.print(f"re-queued interrupted trials: {list(summary.recovered)}")
    console.print("next: tuner export (best vllm serve command), tuner report, tuner dashboard")
