"""Database URLs: normalize, mask credentials, open engines with clear errors, survive restarts.

Optuna's storage and our tables use the same URL. `postgresql://` means psycopg 3 here (the
driver we install); SQLite files get their parent directory created.

A database server restarted mid-study (an upgrade, a failover, `pg_ctlcluster restart`) closes
every pooled connection and refuses new ones for a few seconds. Engines therefore ping a pooled
connection before using it (`pool_pre_ping`) and, once the first connection has succeeded,
retry a refused connection for up to `RECONNECT_S` (`keep_reconnecting`): a bad URL still fails
at once, a restart is waited out.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError, SQLAlchemyError

from tuner.errors import StorageError

__all__ = ["RECONNECT_S", "keep_reconnecting", "masked", "normalize_url", "open_engine"]

RECONNECT_S = 60.0


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StorageError(
            f"storage URL {url!r} is not a database URL ({exc}); "
            "use e.g. sqlite:///path/tuner.db or postgresql://user@host/db"
        ) from None


def masked(url: str) -> str:
    """The URL with its password hidden, safe to print or log."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "<unparseable storage URL>"


def normalize_url(url: str) -> str:
    """Pick installed drivers (psycopg 3 for Postgres); keep the URL otherwise unchanged."""
    parsed = _parse(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _sqlite_file(parsed: URL) -> Path | None:
    db = parsed.database
    if (
        parsed.get_backend_name() != "sqlite"
        or not db
        or db == ":memory:"
        or db.startswith("file:")
    ):
        return None
    return Path(db).expanduser()


def open_engine(url: str, *, check: bool = True) -> Engine:
    """An engine for `url`; with `check`, connect once so a bad URL fails here, in one line."""
    normalized = normalize_url(url)
    parsed = make_url(normalized)
    connect_args: dict[str, object] = {}
    path = _sqlite_file(parsed)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the directory for SQLite file {path}: {exc.strerror}; "
                "choose a writable path with --storage"
            ) from None
        connect_args["timeout"] = 60
    elif parsed.get_backend_name() == "postgresql":
        connect_args["connect_timeout"] = 10
    try:
        engine = create_engine(normalized, connect_args=connect_args, pool_pre_ping=True)
    except (NoSuchModuleError, ArgumentError, ImportError) as exc:
        raise StorageError(
            f"storage URL {masked(url)} needs a database driver that is not installed ({exc})"
        ) from None
    if path is not None:
        event.listen(engine, "connect", _sqlite_pragmas)
    if check:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except (OperationalError, SQLAlchemyError) as exc:
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            raise StorageError(
                f"cannot open storage {masked(url)}: {reason}; "
                "check the URL, that the server is up, and the credentials"
            ) from None
        keep_reconnecting(engine)
    return engine


def keep_reconnecting(engine: Engine, seconds: float = RECONNECT_S) -> None:
    """Retry refused connections of a server database for `seconds` (call after a first connect).

    SQLite files need no reconnecting. Works on any engine, Optuna's `RDBStorage.engine` too.
    """
    if engine.dialect.name == "sqlite":
        return

    def connect(dialect: Any, _rec: Any, cargs: Any, cparams: Any) -> Any:
        deadline = time.monotonic() + seconds
        while True:
            try:
                return dialect.connect(*cargs, **cparams)
            except dialect.loaded_dbapi.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise
                _log.warning("database unreachable (%s); retrying", str(exc).splitlines()[0])
                time.sleep(0.5)

    event.listen(engine, "do_connect", connect)


_log = logging.getLogger(__name__)


def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
    # WAL lets optuna-dashboard read while the driver writes; foreign keys keep cascades real.
    cursor = dbapi_conn.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
