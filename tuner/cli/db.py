"""`tuner db`: migrate tuner's tables and show their revision."""

from __future__ import annotations

import typer

from tuner.cli._app import StorageOption, console
from tuner.cli._checks import sqlite_path
from tuner.cli._checks import storage_url as checked_storage

app = typer.Typer(help="Database migrations for tuner's tables.", no_args_is_help=True)


@app.command("upgrade")
def upgrade_cmd(storage: StorageOption = None) -> None:
    """Create or migrate tuner's tables to the newest revision."""
    url = checked_storage(storage)
    from tuner.storage import current, head, masked, upgrade  # Alembic: only when needed

    upgrade(url)
    console.print(f"{masked(url)} is at revision {current(url)} (head {head()})")


@app.command("current")
def current_cmd(storage: StorageOption = None) -> None:
    """Print the revision of tuner's tables (none when never created)."""
    url = checked_storage(storage, must_exist=False)
    path = sqlite_path(url)
    if path is not None and not path.exists():  # reading the revision must not create a file
        console.print(f"none (no database file at {path} yet)", soft_wrap=True, highlight=False)
        return
    from tuner.storage import current, head

    rev = current(url)
    state = "up to date" if rev == head() else f"head is {head()}"
    console.print(f"{rev or 'none'} ({state})")
