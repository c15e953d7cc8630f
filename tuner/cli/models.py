"""`tuner models`: build the small test models into the cache."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from tuner.cli._app import console
from tuner.models import MODEL_NAMES, prepare

app = typer.Typer(help="Small test models for CPU runs.", no_args_is_help=True)


@app.command("prepare")
def prepare_cmd(
    name: str = typer.Argument(..., help=f"One of: {', '.join(MODEL_NAMES)}"),
    cache_dir: Path | None = typer.Option(
        None,
        "--cache-dir",
        envvar="TUNER_CACHE_DIR",
        help="Cache directory (default ~/.cache/tuner).",
    ),
) -> None:
    """Build test model NAME into the cache (once) and print its path."""
    from tuner.settings import get_settings

    def say(line: str) -> None:  # the "preparing ..." line, on stderr: stdout is the path
        print(line, file=sys.stderr, flush=True)

    path = prepare(name, cache_dir or get_settings().cache_path(), say=say)
    console.print(str(path), soft_wrap=True, highlight=False)


@app.command("list")
def list_cmd() -> None:
    """List the test models that can be prepared."""
    for name in MODEL_NAMES:
        console.print(name)
