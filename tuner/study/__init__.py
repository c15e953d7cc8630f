"""The study: presets and search space, the Optuna loop over Ray workers, resume.

Names are loaded on first use: `tuner.study.attrs` (read by reports) must not pay for Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "OptimizeOptions",
    "Preset",
    "StudySummary",
    "ThroughputPlan",
    "TrialRequest",
    "TrialResult",
    "enqueue_run",
    "evaluate",
    "known_presets",
    "load_preset",
    "open_study",
    "optimize",
    "run_waiting",
]

_WHERE = {
    "OptimizeOptions": "driver",
    "StudySummary": "driver",
    "open_study": "driver",
    "optimize": "driver",
    "run_waiting": "driver",
    "enqueue_run": "roles",
    "ThroughputPlan": "evaluate",
    "TrialRequest": "evaluate",
    "TrialResult": "evaluate",
    "evaluate": "evaluate",
    "Preset": "space",
    "known_presets": "space",
    "load_preset": "space",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner.study' has no attribute {name!r}")
    return getattr(importlib.import_module(f"tuner.study.{module}"), name)
