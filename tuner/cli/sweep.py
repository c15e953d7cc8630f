"""`tuner sweep`: the study's finalists at several agent counts, the crossover and a schedule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from tuner.cli._app import CacheDirOption, StorageOption, app, console, console_err
from tuner.cli._checks import cache_dir as checked_cache
from tuner.cli._checks import storage_url as checked_storage
from tuner.cli._checks import writable_dir
from tuner.cli._study import StudyOption, pick_study
from tuner.errors import ConfigError


def parse_agents(text: str | None) -> tuple[int, ...] | None:
    """ "1,2,4" -> (1, 2, 4); None stays None. ConfigError names the bad item."""
    if text is None:
        return None
    out = []
    for item in text.split(","):
        if not item.strip().isdigit() or int(item) < 1:
            raise ConfigError(
                f"--agents {text!r}: {item.strip()!r} is not a positive whole number; "
                "give agent counts like 1,2,4"
            )
        out.append(int(item))
    return tuple(sorted(set(out)))


def parse_schedule(text: str | None) -> tuple[tuple[int, int, int], ...] | None:
    """ "1-2:3,3-8:0" -> ((1, 2, 3), (3, 8, 0)), checked by vLLM's rules; ConfigError if not."""
    if text is None:
        return None
    from tuner.server.knobs import check_depth_schedule

    entries = []
    for item in text.split(","):
        batches, _, depth = item.strip().partition(":")
        first, _, last = batches.partition("-")
        try:
            entries.append((int(first), int(last or first), int(depth)))
        except ValueError:
            raise ConfigError(
                f"--schedule-given {text!r}: {item.strip()!r} is not FIRST-LAST:DEPTH; "
                "give batch-size ranges and depths like 1-2:3,3-8:0"
            ) from None
    try:
        schedule = check_depth_schedule(tuple(entries))
    except ValueError as exc:
        raise ConfigError(f"--schedule-given {text!r}: {exc}") from None
    if max(depth for _, _, depth in schedule) < 1:
        raise ConfigError(f"--schedule-given {text!r}: every depth is 0; that is the baseline")
    return schedule


@app.command("sweep")
def sweep_cmd(
    study: StudyOption = None,
    agents: Annotated[
        str | None,
        typer.Option("--agents", help="Agent counts, e.g. 1,2,4 (default: the preset's)."),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=1, help="Candidates swept beside the baseline.")
    ] = 2,
    tasks: Annotated[
        int | None, typer.Option("--tasks", min=1, help="Scored tasks per load (default: preset).")
    ] = None,
    schedule: Annotated[
        bool,
        typer.Option("--schedule", help="Also run the depth schedule derived from the sweep."),
    ] = False,
    schedule_given: Annotated[
        str | None,
        typer.Option(
            "--schedule-given",
            help="Sweep this depth schedule (FIRST-LAST:DEPTH,...) instead of the derived one.",
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, help="Measure at most N configs now; run again to resume."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write load-sweep.png and load-sweep.json here.")
    ] = None,
    storage: StorageOption = None,
    cache_dir: CacheDirOption = None,
) -> None:
    """Tasks/h and per-task latency of the finalists against the number of agents."""
    url = checked_storage(storage, must_exist=True)  # before Ray or a server
    cache = checked_cache(cache_dir)
    if out is not None:
        writable_dir(out, "output directory", "--out")
    from tuner.study.stages.load_sweep import SweepOptions, run_sweep

    options = SweepOptions(
        storage_url=url,
        cache_dir=cache,
        study_name=pick_study(url, study),
        agents=parse_agents(agents),
        top=top,
        tasks=tasks,
        limit=limit,
        schedule=schedule,
        schedule_given=parse_schedule(schedule_given),
    )
    try:
        sweep = run_sweep(options, on_state=print_state)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the running server is stopped already
        print_state("interrupted; run the same tuner sweep again to resume")
        raise typer.Exit(130) from None
    print_sweep(sweep)
    if out is not None:
        from tuner.results.load_sweep_plot import sweep_png

        out.mkdir(parents=True, exist_ok=True)
        (out / "load-sweep.json").write_text(json.dumps(sweep.to_json(), indent=1) + "\n")
        (out / "load-sweep.png").write_bytes(sweep_png(sweep))
        console.print(f"wrote {out / 'load-sweep.png'}", markup=False, highlight=False)


def print_state(line: str) -> None:
    """One state line of the sweep, on stderr as it is (`tuner optimize`'s too)."""
    console_err.print(line, markup=False, highlight=False, soft_wrap=True)


def print_sweep(sweep: object) -> None:
    """The sweep table, the crossover, the answer per load and the schedule's command."""
    from tuner.results.load_sweep import LoadSweep, load_lines, load_table_rows

    assert isinstance(sweep, LoadSweep)
    columns, rows = load_table_rows(sweep)
    table = Table(title=f"Load sweep ({sweep.mode}, {sweep.tasks} tasks per load)")
    for i, name in enumerate(columns):
        table.add_column(Text(name), justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    console.print(table)
    for line in load_lines(sweep):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
