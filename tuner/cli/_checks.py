"""Cheap checks of a command's inputs, run before anything expensive (Ray, a model, a server).

A typo in `--storage` used to cost a user minutes: `tuner optimize` started a local Ray, and
only then opened the database (a missing SQLite directory was created, or the error came after
five lines of Ray's start-up noise). Every command that reads a storage calls `storage_url()`
first: it parses the URL, checks a SQLite file's directory (exists, is a directory, writable)
or the file itself (exists for a command that only reads, is a SQLite database), and connects
to a server database with a short timeout. Each failure is a `StorageError` (one line, exit
code 2), raised before anything is written.

The default storage (`~/.local/share/tuner/tuner.db`, no `--storage`) is the one exception:
tuner creates its own data directory there.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tuner.errors import ConfigError, StorageError

__all__ = [
    "PG_CONNECT_TIMEOUT_S",
    "budget_seconds",
    "cache_dir",
    "sqlite_path",
    "storage_url",
    "writable_dir",
]

# libpq's smallest connect timeout is 2 s; a refused port answers at once.
PG_CONNECT_TIMEOUT_S = 2
_SQLITE_MAGIC = b"SQLite format 3\x00"
_CREDENTIALS = re.compile(r"(://[^:/@\s]+):[^@\s]+@")
_HINT = "use e.g. --storage sqlite:///path/tuner.db or postgresql://user@host/db"


def storage_url(option: str | None, *, must_exist: bool = False) -> str:
    """The storage URL a command will use (`option`, else `TUNER_STORAGE`, else the default),
    checked cheaply. `must_exist`: the command only reads, so a SQLite file must be there
    already (reading must not create an empty database)."""
    from tuner.settings import get_settings

    settings = get_settings()
    url = option or settings.storage_url()
    default = option is None and settings.storage is None
    _check(url, must_exist=must_exist, default=default)
    IN_USE[:] = [url]
    return url


# The storage URL this command checked and uses (`storage_url`), so that a storage failure
# later can say where it happened (tuner.cli._app).
IN_USE: list[str] = []


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (None for other databases); call after `storage_url()`."""
    sqlite = _SQLITE.match(url)
    if sqlite is None or sqlite["host"] or not sqlite["db"] or sqlite["db"] == ":memory:":
        return None
    return Path(sqlite["db"]).expanduser()


# SQLAlchemy's URL syntax, "NAME://REST" (its make_url refuses anything else). A SQLite URL is
# checked without importing SQLAlchemy (a third of a second at start-up): "sqlite:///PATH" with
# no host and an optional "?query".
_URL = re.compile(r"^(?P<name>[\w+]+)://(?P<rest>.*)$", re.DOTALL)
_SQLITE = re.compile(
    r"^sqlite(?:\+\w+)?://(?P<host>[^/?]*)(?:/(?P<db>[^?]*))?(?:\?.*)?$", re.DOTALL
)


def _check(url: str, *, must_exist: bool, default: bool) -> None:
    if _URL.match(url.strip()) is None:
        shown = _CREDENTIALS.sub(r"\1:***@", url)
        raise StorageError(f"storage URL {shown!r} is not a database URL; {_HINT}")
    sqlite = _SQLITE.match(url)
    if sqlite is not None and not sqlite["host"]:
        _check_sqlite(url, sqlite["db"], must_exist=must_exist, default=default)
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from tuner.storage.engine import masked

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        shown = _CREDENTIALS.sub(r"\1:***@", url)
        raise StorageError(f"storage URL {shown!r} is not a database URL; {_HINT}") from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _check_sqlite(url, parsed.database, must_exist=must_exist, default=default)
    elif backend in ("postgresql", "postgres"):
        _check_postgres(url)
    else:
        raise StorageError(
            f"storage URL {masked(url)} is a {backend} database; tuner stores studies in "
            f"SQLite or PostgreSQL (the database drivers it installs); {_HINT}"
        )


def _check_sqlite(url: str, database: str | None, *, must_exist: bool, default: bool) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        raise StorageError(
            f"storage URL {url!r} names no SQLite file (an in-memory database is lost when the "
            "command ends); give a path: sqlite:///path/tuner.db"
        )
    path = Path(database).expanduser()
    if path.exists():
        if path.is_dir():
            raise StorageError(f"SQLite storage {path} is a directory; name a file in it")
        if not os.access(path, os.R_OK) or (not must_exist and not os.access(path, os.W_OK)):
            raise StorageError(
                f"SQLite storage {path} is not {'readable' if must_exist else 'writable'} by "
                "this user; fix its permissions or choose another --storage"
            )
        try:
            with path.open("rb") as f:
                head = f.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise StorageError(f"cannot read SQLite storage {path}: {exc.strerror}") from None
        if head and head != _SQLITE_MAGIC:
            raise StorageError(
                f"{path} is not a SQLite database (it starts with {head[:8]!r}); "
                "choose another --storage"
            )
        return
    if must_exist:
        raise StorageError(
            f"no database at {path} (the file does not exist); run `tuner optimize` first, "
            "or pass the --storage a study was run with"
        )
    parent = path.parent
    if default and not parent.exists():
        return  # tuner's own data directory: created on first use
    if not parent.is_dir():
        why = "is not a directory" if parent.exists() else "does not exist"
        raise StorageError(
            f"the directory {parent} of SQLite storage {path} {why}; create it or choose "
            "another --storage"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise StorageError(
            f"the directory {parent} of SQLite storage {path} is not writable by this user; "
            "choose another --storage"
        )


def _check_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
    from sqlalchemy.pool import NullPool

    from tuner.storage.engine import masked, normalize_url

    try:
        engine = create_engine(
            normalize_url(url),
            connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S},
            poolclass=NullPool,
        )
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise StorageError(
            f"storage URL {masked(url)} needs a database driver that is not installed "
            f"({type(exc).__name__})"
        ) from None
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        line = reason[0] if reason else type(exc).__name__
        password = engine.url.password
        if password:
            line = line.replace(str(password), "***")
        raise StorageError(
            f"cannot open storage {masked(url)}: {line}; check the URL, that the server is up "
            f"(it must answer within {PG_CONNECT_TIMEOUT_S} s), and the credentials"
        ) from None
    finally:
        engine.dispose()


def cache_dir(option: Path | None) -> Path:
    """The cache directory a command will use, checked: a directory, or creatable, writable."""
    if option is None:
        from tuner.settings import get_settings

        option = get_settings().cache_path()
    path = option.expanduser()
    return writable_dir(path, "cache directory", "--cache-dir (or TUNER_CACHE_DIR)")


def writable_dir(path: Path, what: str, option: str) -> Path:
    """`path` if it is a writable directory or can be created as one; ConfigError if not."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise ConfigError(f"{what} {path}: {probe} is not a directory; choose another {option}")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{what} {path}: {probe} is not writable by this user; choose another {option}"
        )
    return path


_DURATION = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+)s)?$")


def budget_seconds(text: str) -> float:
    """`--budget`'s seconds: a duration with its units, hours, minutes, seconds in that order
    (`90s`, `20m`, `2h`, `1h30m`); ConfigError (one line, exit 2) for anything else, before
    anything is loaded or written."""
    found = _DURATION.match(text.strip().lower())
    hint = "give a duration with its units, e.g. 90s, 20m, 2h or 1h30m"
    if found is None or not any(found.groups()):
        raise ConfigError(f"--budget {text!r} is not a duration; {hint}")
    seconds = sum(
        int(found[unit] or 0) * scale for unit, scale in (("h", 3600), ("m", 60), ("s", 1))
    )
    if seconds <= 0:
        raise ConfigError(f"--budget {text!r} is no time at all; {hint}")
    return float(seconds)
