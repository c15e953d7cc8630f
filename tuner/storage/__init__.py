"""Storage: tuner's tables beside Optuna's in one database (SQLite or Postgres)."""

from tuner.storage.engine import masked, normalize_url, open_engine
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
    "upgrade",
]
