"""`tuner export`, `tuner report`, `tuner dashboard`: what a user takes away from a study."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli._app import StorageOption, app, console, console_err
from tuner.cli._checks import storage_url as checked_storage
from tuner.cli._checks import writable_dir
from tuner.cli._study import StudyOption, pick_study, study_names

__all__ = ["dashboard_cmd", "export_cmd", "report_cmd"]

# tuner.results.export_render's FORMATS, written out: importing tuner.results (Optuna, NumPy) at
# start-up cost every command half a second before it could check its input (tests/unit/
# test_cli_preflight.py checks the two lists agree).
FORMATS = ("shell", "json", "yaml", "systemd", "compose")

# Typer shows an Enum's values as the allowed choices and rejects others in one line.
ExportFormat = Enum("ExportFormat", {name: name for name in FORMATS}, type=str)  # type: ignore[misc]


def _url(storage: str | None) -> str:
    # Checked before anything is opened: these commands only read, so a missing SQLite file
    # is an error (reading must not create an empty database).
    return checked_storage(storage, must_exist=True)


@app.command("export")
def export_cmd(
    study: StudyOption = None,
    fmt: ExportFormat = typer.Option(
        "shell",
        "--format",
        help="shell: a `vllm serve` command; json/yaml: argv and measurements; "
        "systemd: a unit file; compose: a service on the vllm/vllm-openai image.",
    ),
    storage: StorageOption = None,
) -> None:
    """Print the best feasible config as a `vllm serve MODEL ...` command, with the evidence.

    A config is exported only when it beats no speculation on its paired rounds, Holm-corrected
    over the configs judged; without confirmation rounds the export says "unconfirmed".
    """
    url = _url(storage)
    from tuner.results import choose_export, load_results, render_export

    choice = choose_export(load_results(url, pick_study(url, study)))
    typer.echo(render_export(choice, fmt.value), nl=False)


@app.command("report")
def report_cmd(
    study: StudyOption = None,
    out: Path = typer.Option(
        Path("tuner-report"), "--out", help="Directory for report.md, report.html and PNGs."
    ),
    storage: StorageOption = None,
) -> None:
    """Print the study's tables and write them with plots as Markdown, PNG and HTML."""
    writable_dir(out, "report directory", "--out")  # before the tables are printed
    url = _url(storage)
    from tuner.results import load_results, write_report
    from tuner.results.report import summary_lines, terminal_tables, to_rich

    results = load_results(url, pick_study(url, study))
    for line in summary_lines(results):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for table in terminal_tables(results):
        console.print(to_rich(table))
    files = write_report(results, out)
    console.print(
        f"wrote {files.markdown}, {files.html} and {len(files.plots)} plots",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("dashboard")
def dashboard_cmd(
    study: Annotated[
        str | None,
        typer.Option(
            "--study",
            help="Study whose page to print (default: the only one; several: all are served).",
        ),
    ] = None,
    storage: StorageOption = None,
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes it to the network)."
    ),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to listen on."),
) -> None:
    """Serve optuna-dashboard on the study storage (Ctrl-C stops it).

    The study's page (its note holds the recommendation) is printed: the one named, or the only
    one. The dashboard is where several studies are browsed, so a storage of several is served
    whole when none is named, and its studies are listed.
    """
    url = _url(storage)  # checked before optuna-dashboard's import (a second)
    # optuna-dashboard is needed by this command alone; others run where it is missing.
    from tuner.results.dashboard import serve_dashboard, study_page
    from tuner.storage import masked

    where = f"http://{host}:{port}"
    names = study_names(url)
    if study is None and len(names) > 1:
        line = f"optuna-dashboard for {masked(url)} on {where}/: studies {', '.join(names)}"
    else:
        name = pick_study(url, study)
        line = f"optuna-dashboard for {masked(url)}: study {name!r} at {where}"
        page = study_page(url, name)
        line += f"{page} (what to deploy and why: {where}{page}/note)"
    console_err.print(line, markup=False, highlight=False, soft_wrap=True)
    serve_dashboard(url, host=host, port=port)
