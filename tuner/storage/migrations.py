"""Alembic for our tables, with its own version table beside Optuna's `alembic_version`.

The migration scripts live in the repository's top-level `alembic/`; a wheel carries them as
`tuner/_alembic`. Both layouts are found here, so `tuner db upgrade` works from either.
"""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from alembic import command
from tuner.storage.engine import open_engine

__all__ = ["VERSION_TABLE", "current", "downgrade", "head", "script_location", "upgrade"]

VERSION_TABLE = "tuner_alembic_version"


def script_location() -> Path:
    """The directory holding `env.py` and `versions/` (installed wheel or source tree)."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "_alembic", package_dir.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise FileNotFoundError(f"tuner's Alembic migrations are missing next to {package_dir}")


def _config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(script_location()))
    return cfg


def _run(url: str, fn: str, revision: str) -> None:
    engine = open_engine(url)
    try:
        with engine.begin() as conn:
            cfg = _config()
            cfg.attributes["connection"] = conn
            getattr(command, fn)(cfg, revision)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate our tables up to `revision` (default: the newest)."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str = "base") -> None:
    """Migrate our tables down to `revision` (default: drop them all)."""
    _run(url, "downgrade", revision)


def current(url: str) -> str | None:
    """The revision the database is at, or None when our tables were never created."""
    engine = open_engine(url)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
            return ctx.get_current_revision()
    finally:
        engine.dispose()


def head() -> str:
    """The newest revision shipped with this version of tuner."""
    rev = ScriptDirectory.from_config(_config()).get_current_head()
    assert rev is not None
    return rev
