"""The root Typer app and the consoles every command prints through."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

from tuner import __version__

__all__ = ["StorageOption", "app", "console", "console_err"]

app = typer.Typer(
    name="tuner",
    help="Pick a vLLM server's speculative-decoding config by successful agent tasks per hour.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
console_err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"tuner {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """tuner: speculative decoding tuned for agent workloads."""


StorageOption = Annotated[
    str | None,
    typer.Option(
        "--storage",
        envvar="TUNER_STORAGE",
        show_envvar=True,
        help="Database URL (sqlite:///path or postgresql://...). "
        "Default: ~/.local/share/tuner/tuner.db",
    ),
]
