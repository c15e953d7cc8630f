"""tuner: pick a vLLM server's speculative-decoding configuration by successful agent tasks/hour.

The public API, loaded on first use (Ray, vLLM-side and plotting modules cost seconds):

- presets and studies: `load_preset`, `Preset`, `run_study` (the whole of `tuner optimize`:
  search, confirmation, load sweep, dashboard note; returns a `StudyRun`, tables through
  `StudyHooks`), `optimize` (the search alone), `OptimizeOptions`, `explain`;
- servers: `ServerSpec`, `SpeculativeSpec`, `Launcher`, `StartupFailure`;
- the workload: `WorkloadSettings`, `run_workload`, `run_workload_sync`, `run_throughput`;
- storage and results: `Store`, `load_results`, `choose_export`, `render_export`,
  `write_report`;
- errors: `TunerError` and its subclasses (tree in `tuner.errors`).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_WHERE = {
    "ConfigError": "tuner.errors",
    "Launcher": "tuner.server",
    "ModelPrepError": "tuner.errors",
    "OptimizeOptions": "tuner.study",
    "Preset": "tuner.study",
    "ServerError": "tuner.errors",
    "ServerSpec": "tuner.server",
    "SpeculativeSpec": "tuner.server",
    "StartupFailed": "tuner.server.failures",
    "StartupFailure": "tuner.server",
    "StorageError": "tuner.errors",
    "Store": "tuner.storage",
    "StudyError": "tuner.errors",
    "StudyHooks": "tuner.study.pipeline",
    "StudyRun": "tuner.study.pipeline",
    "TunerError": "tuner.errors",
    "WorkloadError": "tuner.errors",
    "WorkloadSettings": "tuner.workload",
    "choose_export": "tuner.results",
    "explain": "tuner.study.stages.controls",
    "load_preset": "tuner.study",
    "load_results": "tuner.results",
    "optimize": "tuner.study",
    "render_export": "tuner.results",
    "run_study": "tuner.study.pipeline",
    "run_throughput": "tuner.workload",
    "run_workload": "tuner.workload",
    "run_workload_sync": "tuner.workload",
    "write_report": "tuner.results",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return [*__all__, "__version__"]
