"""`tuner explain`: run the controls that split a speculative config's loss into its causes."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.table import Table

from tuner.cli._app import CacheDirOption, StorageOption, app, console
from tuner.cli._checks import cache_dir as checked_cache
from tuner.cli._checks import storage_url as checked_storage
from tuner.cli._study import StudyOption, pick_study


def _pct(value: float | None) -> str:
    return "not measured" if value is None else f"{100 * value:.0f}%"


@app.command("explain")
def explain_cmd(
    study: StudyOption = None,
    trial: Annotated[
        int | None, typer.Option("--trial", help="Speculative trial (default: the best one).")
    ] = None,
    storage: StorageOption = None,
    cache_dir: CacheDirOption = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the table and attribution as JSON.")
    ] = False,
) -> None:
    """Why did a speculative config lose? Memory (a KV-cut control) versus cache reuse."""
    url = checked_storage(storage, must_exist=True)  # before Ray or a server
    cache = checked_cache(cache_dir)
    from tuner.study import OptimizeOptions
    from tuner.study.stages.controls import explain

    options = OptimizeOptions(
        storage_url=url,
        cache_dir=cache,
        study_name=pick_study(url, study),
        show_progress=False,
    )
    result = explain(options, trial)
    if as_json:
        a = result.attribution
        payload = {
            "study": result.study_name,
            "candidate": result.candidate,
            "rows": [asdict(row) for row in result.rows],
            "baseline_tasks_per_hour": a.baseline,
            "candidate_tasks_per_hour": a.candidate,
            "kv_cut_tasks_per_hour": a.kv_cut,
            "lost_tasks_per_hour": a.lost,
            "explained_by_memory": a.explained_by_memory,
            "memory_share": a.memory_share,
            "sentence": result.sentence(),
            "split": result.split(),
            "kv_cut_mismatch": result.kv_cut_mismatch,
            "notes": list(result.notes),
            "controls_run": result.controls_run,
        }
        console.print_json(json.dumps(payload))
        return
    table = Table(title=f"why trial {result.candidate} of {result.study_name} scored what it did")
    for column in (
        "server",
        "trial",
        "tasks/h (95% CI)",
        "KV cache tokens",
        "block",
        "reuse all / short / none",
        "preemptions",
    ):
        table.add_column(column)
    for row in result.rows:
        table.add_row(
            row.label,
            str(row.trial_number),
            f"{row.tasks_per_hour:.0f} "
            f"({row.tasks_per_hour_low:.0f}-{row.tasks_per_hour_high:.0f})",
            f"{row.kv_cache_tokens:,}" if row.kv_cache_tokens is not None else "not measured",
            str(row.block_size) if row.block_size is not None else "not measured",
            " / ".join(_pct(x) for x in (row.reused_all, row.reused_short, row.reused_nothing))
            + (f" of {row.reuse_steps}" if row.reuse_steps else ""),
            str(row.preemptions) if row.preemptions is not None else "not measured",
        )
    console.print(table)
    console.print(result.sentence())
    console.print(result.split())
    for note in result.notes:
        console.print(f"note: {note}")
    if result.controls_run:
        console.print(f"({result.controls_run} control trial(s) run and stored in the study)")
