"""The `tuner` command line: thin commands that parse, call one library function, and print.

Errors a user can cause are `TunerError`s: `main()` prints their one line and exits with code 2,
never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
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
    """Entry point of the `tuner` script (errors become one line: `tuner.cli._app.run`).

    An interrupted command (exit 130) of the script itself (`argv` None) leaves at once once
    its own cleanup is done (servers stopped, trials re-queued, Ray shut down, output
    flushed): the interpreter's teardown of Ray's and gRPC's native objects took 5 s more of
    a SIGTERM's 10 (issue 48, measured in the confirmation stage on 2 loaded cores).
    """
    code = run(app, argv)
    if code == 130 and argv is None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(130)
    sys.exit(code)
