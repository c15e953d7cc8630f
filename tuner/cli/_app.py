"""The root Typer app, the consoles every command prints through, and how errors are shown.

`run()` is the one place where an error becomes what the user sees: exactly one line on
stderr starting with "error: ", exit code 2, never a traceback, never a password. A usage
error names the option and points at `--help`; a storage that fails mid-run (disk full, the
server gone) says so; an unexpected exception (a bug) is one line too, with the traceback
saved to a file for the report, and exit code 1.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from tuner import __version__

__all__ = ["CacheDirOption", "StorageOption", "app", "console", "console_err", "run"]

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

# The commands that start servers share one --cache-dir (`tuner models prepare` has its own
# help text).
CacheDirOption = Annotated[
    Path | None,
    typer.Option("--cache-dir", envvar="TUNER_CACHE_DIR", help="Cache directory."),
]


_CREDENTIALS = re.compile(r"(://[^:/@\s]+):[^@\s]+@")


def _scrub(line: str) -> str:
    """One line, credentials in URLs masked (a driver's message may echo its URL)."""
    flat = " ".join(part.strip() for part in line.splitlines() if part.strip())
    return _CREDENTIALS.sub(r"\1:***@", flat)


def _say(line: str) -> None:
    console_err.print(f"error: {_scrub(line)}", markup=False, highlight=False, soft_wrap=True)


def _crash_file(exc: BaseException) -> Path | None:
    text = "".join(traceback.format_exception(exc))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    try:
        with tempfile.NamedTemporaryFile(
            "w", prefix=f"tuner-crash-{stamp}-", suffix=".txt", delete=False
        ) as out:
            out.write(_CREDENTIALS.sub(r"\1:***@", text))
            return Path(out.name)
    except OSError:
        return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _storage_cause(exc: BaseException, db_error: type[BaseException]) -> str | None:
    """The database's own message when a wrapped error (Optuna's) was caused by it."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, db_error):
            return _first_line(getattr(cause, "orig", None) or cause)
        cause = cause.__cause__ or cause.__context__
    return None


def run(root: typer.Typer, argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code after printing any error as one line."""
    # pydantic's and SQLAlchemy's errors are recognised only once a command has imported them:
    # importing them here cost every command a third of a second before it could check its
    # input (tuner/cli/_checks.py), and an error of a module never imported cannot occur.
    from tuner.errors import TunerError, first_error

    try:
        code = root(args=argv, standalone_mode=False)
        if isinstance(code, int):
            # typer turns Ctrl-C into Exit(130) and, not standalone, returns an Exit's code
            # instead of raising it: ignoring it made an interrupted command exit 0.
            return code
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.Abort:
        _say("aborted")
        return 130
    except KeyboardInterrupt:
        _say("interrupted; run the same command again to resume")
        return 130
    except typer.TyperException as exc:
        # typer vendors click: usage errors (bad option values included) land here.
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" or not hasattr(exc, "format_message"):
            show = getattr(exc, "show", None)
            if show is not None:
                show()
            else:
                _say(str(exc))
            return 2
        where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        _say(f"{exc.format_message()}{where}")
        return 2
    except TunerError as exc:
        _say(exc.user_line())
        return 2
    except Exception as exc:
        validation = _loaded_error("pydantic_core", "ValidationError")
        storage_error = _loaded_error("sqlalchemy.exc", "SQLAlchemyError")
        if validation is not None and isinstance(exc, validation):
            where, message = first_error(exc)  # type: ignore[arg-type]
            _say(f"invalid {exc.title} setting {where or exc.title}: {message}")  # type: ignore[attr-defined]
            return 2
        if storage_error is not None and isinstance(exc, storage_error):
            _say(_storage_failed(_first_line(getattr(exc, "orig", None) or exc)))
            return 2
        if isinstance(exc, OSError):
            where = f" ({exc.filename})" if exc.filename else ""
            _say(
                f"{exc.strerror or _first_line(exc)}{where}; fix it and run the same command again"
            )
            return 2
        storage = _storage_cause(exc, storage_error) if storage_error is not None else None
        if storage is not None:  # Optuna wraps the database's error in its own
            _say(_storage_failed(storage))
            return 2
        saved = _crash_file(exc)
        where = f"; traceback in {saved}" if saved else ""
        _say(f"internal error: {type(exc).__name__}: {_first_line(exc)}{where}; please report it")
        return 1
    return 0


# Below this much free space, a failed write to a SQLite file is the disk's doing, whatever
# SQLite called it ("database or disk is full", or "disk I/O error" from a journal or WAL
# write); above it, SQLite's own "full" (its max_page_count) is not the disk's.
_FULL_BELOW_BYTES = 1 << 20


def _storage_failed(reason: str) -> str:
    """The one line for a failed storage: for a SQLite file on a full disk, which file, how
    much space is left and what to do; else the database's own reason."""
    from tuner.cli._checks import IN_USE, sqlite_path

    path = sqlite_path(IN_USE[0]) if IN_USE else None
    if path is not None:
        try:
            free: int | None = shutil.disk_usage(path.parent).free
        except OSError:
            free = None
        if free is not None and free < _FULL_BELOW_BYTES:
            return (
                f"the storage failed: the disk under the SQLite file {path} is full "
                f"({free:,} bytes free; SQLite said: {reason}); what was stored before is "
                "kept: free space on that disk (or move the file elsewhere and point --storage "
                "at it), then run the same command to resume"
            )
    return (
        f"the storage failed: {reason}; what was stored before is kept, fix the cause (disk "
        "space, the database server) and run the same command to resume"
    )


def _loaded_error(module: str, name: str) -> type[BaseException] | None:
    """An exception class of `module` if a command imported it (else none of its errors can
    have been raised)."""
    loaded = sys.modules.get(module)
    error = getattr(loaded, name, None) if loaded is not None else None
    return error if isinstance(error, type) and issubclass(error, BaseException) else None
