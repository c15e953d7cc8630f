"""The study: presets and search space, the Optuna loop over Ray workers, resume.

Importing the package does not import Ray: the driver imports it when a study starts, and only
`tuner.study.workers` (the Ray actors) imports it at module level. One trial's work is
`tuner.study.evaluate.evaluate`; the package does not export that function, so the name
`tuner.study.evaluate` stays the module.
"""

from __future__ import annotations

from tuner.study.driver import (
    OptimizeOptions,
    StudySummary,
    open_study,
    optimize,
    run_waiting,
)
from tuner.study.evaluate import ThroughputPlan, TrialRequest, TrialResult
from tuner.study.roles import enqueue_run
from tuner.study.space import Preset, known_presets, load_preset

__all__ = [
    "OptimizeOptions",
    "Preset",
    "StudySummary",
    "ThroughputPlan",
    "TrialRequest",
    "TrialResult",
    "enqueue_run",
    "known_presets",
    "load_preset",
    "open_study",
    "optimize",
    "run_waiting",
]
