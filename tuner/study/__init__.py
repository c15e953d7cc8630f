"""The study: presets and search space, the Optuna loop over Ray workers, resume.

Importing the package does not import Ray: the driver imports it when a study starts, and only
`tuner.study.trial.workers` (the Ray actors) imports it at module level. One trial's work is
`tuner.study.trial.evaluate.evaluate`; the package does not export that function, so the name
`tuner.study.trial.evaluate` stays the module.
"""

from __future__ import annotations

from tuner.study.search.driver import open_study, optimize, run_waiting
from tuner.study.search.options import OptimizeOptions
from tuner.study.search.roles import enqueue_run
from tuner.study.search.summary import StudySummary
from tuner.study.space import Preset, known_presets, load_preset
from tuner.study.trial.request import ThroughputPlan, TrialRequest, TrialResult

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
