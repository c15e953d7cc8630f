"""Alembic environment for tuner's own tables (never Optuna's, which share the database)."""

from __future__ import annotations

from sqlalchemy import engine_from_config, pool

from alembic import context
from tuner.storage.migrations import VERSION_TABLE
from tuner.storage.schema import Base

config = context.config
target_metadata = Base.metadata


def _ours(name: str | None, type_: str, _parent: object) -> bool:
    # Optuna's tables live in the same database; autogenerate must never touch them.
    return type_ != "table" or (name or "").startswith("tuner_")


def run_migrations() -> None:
    """Run with the caller's connection (tuner.storage.migrations) or a URL from alembic.ini."""
    connection = config.attributes.get("connection")
    if connection is None:
        engine = engine_from_config(
            config.get_section(config.config_ini_section) or {},
            prefix="sqlalchemy.",
            poolclass=pool.NullPool,
        )
        with engine.begin() as connection:
            _configure_and_run(connection)
    else:
        _configure_and_run(connection)


def _configure_and_run(connection: object) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_name=_ours,
        render_as_batch=True,  # SQLite needs batch mode for ALTER
    )
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
