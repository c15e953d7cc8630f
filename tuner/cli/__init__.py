"""The `tuner` command line: thin commands that parse, call one library function, and print.

Errors a user can cause are `TunerError`s: `main()` prints their one line and exits with code 2,
never a traceback.
"""

from __future__ import annotations

import sys

from tuner.cli import cache, db, explain, models, optimize, results, sweep  # noqa: F401 - importing registers commands
from tuner.cli import workload as workload_cli
from tuner.cli._app import app, run

__all__ = ["app", "main"]

app.add_typer(cache.app, name="cache")
app.add_typer(db.app, name="db")
app.add_typer(models.app, name="models")
app.add_typer(workload_cli.app, name="workload")
app.add_typer(workload_cli.bench_app, name="bench")


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `tuner` script (errors become one line: `tuner.cli._app.run`)."""
    sys.exit(run(app, argv))
