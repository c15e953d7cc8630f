"""What `tuner optimize` and `tuner confirm` share around the library call
(`tuner.study.pipeline`): the study's options (its progress by whether output is a terminal),
the tables and styled lines printed as each part of the study ends (`study_hooks`), and
Ctrl-C's exit (130, with the command that resumes).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from tuner.cli._app import console

if TYPE_CHECKING:
    from tuner.study import OptimizeOptions, Preset, StudySummary
    from tuner.study.pipeline import DashboardNote, StudyHooks
    from tuner.study.stages.confirm import ConfirmSummary

__all__ = ["interrupt_exits", "study_hooks", "study_options"]


def study_hooks(preset: Preset | None) -> StudyHooks:
    """The tables and styled lines the study commands print as each part of a study ends
    (`preset`: the search's, whose score words the search table uses; None: no search)."""
    from tuner.cli.sweep import print_state, print_sweep
    from tuner.study.pipeline import StudyHooks

    return StudyHooks(
        searched=(lambda summary: _print_search(summary, preset)) if preset is not None else None,
        confirmed=_print_confirmation,
        sweep_state=print_state,
        swept=print_sweep,
        published=_print_note,
    )


def _print_search(summary: StudySummary, preset: Preset) -> None:
    from tuner.results.configs import describe_config_short
    from tuner.results.words import tph_label

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


def _print_confirmation(result: ConfirmSummary) -> None:
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


def _print_note(note: DashboardNote) -> None:
    if note.error is not None:
        console.print(note.line(), markup=False)
    else:
        console.print(note.line(), markup=False, highlight=False, soft_wrap=True)


def _num(value: float | None) -> str:
    return "not measured" if value is None else f"{value:,.0f}"


def study_options(url: str, cache: Path, study: str | None, **search: Any) -> OptimizeOptions:
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
def interrupt_exits() -> Iterator[None]:
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
