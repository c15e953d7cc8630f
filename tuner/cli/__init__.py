"""The `tuner` command line: thin commands that parse, call one library function, and print.

Errors a user can cause are `TunerError`s: `main()` prints their one line and exits with code 2,
never a traceback.
"""

from __future__ import annotations

import sys

import typer
from pydantic import ValidationError

from tuner.cli import db, explain, models, optimize, results  # noqa: F401 - importing registers commands
from tuner.cli import workload as workload_cli
from tuner.cli._app import app, console_err
from tuner.errors import TunerError

__all__ = ["app", "main"]

app.add_typer(db.app, name="db")
app.add_typer(models.app, name="models")
app.add_typer(workload_cli.app, name="workload")
app.add_typer(workload_cli.bench_app, name="bench")


def _validation_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or exc.title
    return f"invalid {exc.title} setting {where}: {first.get('msg')}"


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `tuner` script."""
    try:
        app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:
        # typer vendors its own click: its usage errors (bad option values included) land
        # here, and show() prints the usage and the one-line reason.
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            console_err.print(f"error: {exc}", markup=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        console_err.print("aborted")
        sys.exit(130)
    except TunerError as exc:
        console_err.print(
            f"error: {exc.user_line()}", markup=False, highlight=False, soft_wrap=True
        )
        sys.exit(2)
    except ValidationError as exc:
        console_err.print(
            f"error: {_validation_line(exc)}", markup=False, highlight=False, soft_wrap=True
        )
        sys.exit(2)
    except KeyboardInterrupt:
        console_err.print("interrupted")
        sys.exit(130)
