"""`tuner db`: migrate tuner's tables and show their revision."""

from __future__ import annotations

import typer

from tuner.cli._app import StorageOption, console
from tuner.settings import get_settings
from tuner.storage import current, head, masked, upgrade

app = typer.Typer(help="Database migrations for tuner's tables.", no_args_is_help=True)


def _url(storage: str | None) -> str:
    return storage or get_settings().storage_url()


@app.command("upgrade")
def upgrade_cmd(storage: StorageOption = None) -> None:
    """Create or migrate tuner's tables to the newest revision."""
    url = _url(storage)
    upgrade(url)
    console.print(f"{masked(url)} is at revision {current(url)} (head {head()})")


@app.command("current")
def current_cmd(storage: StorageOption = None) -> None:
    """Print the revision of tuner's tables (none when never created)."""
    url = _url(storage)
    rev = current(url)
    state = "up to date" if rev == head() else f"head is {head()}"
    console.print(f"{rev or 'none'} ({state})")
