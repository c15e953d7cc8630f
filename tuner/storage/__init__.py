"""Storage: tuner's tables beside Optuna's in one database (SQLite or Postgres).

Names are imported on first use (PEP 562): `tuner.storage.engine` needs SQLAlchemy's core
alone, while the store and the migrations load its ORM and Alembic, which a command that only
checks its `--storage` URL (tuner/cli/_checks.py) must not pay for at start-up.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.storage.engine import masked, normalize_url, open_engine
    from tuner.storage.locks import study_lock
    from tuner.storage.migrations import current, downgrade, head, upgrade
    from tuner.storage.store import Store, Stored, TrialMeasurements

__all__ = [
    "Store",
    "Stored",
    "TrialMeasurements",
    "current",
    "downgrade",
    "head",
    "masked",
    "normalize_url",
    "open_engine",
    "study_lock",
    "upgrade",
]

_WHERE = {
    "masked": "engine",
    "normalize_url": "engine",
    "open_engine": "engine",
    "study_lock": "locks",
    "current": "migrations",
    "downgrade": "migrations",
    "head": "migrations",
    "upgrade": "migrations",
    "Store": "store",
    "Stored": "store",
    "TrialMeasurements": "store",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.storage' has no attribute {name!r}")
    value = getattr(import_module(f"tuner.storage.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
