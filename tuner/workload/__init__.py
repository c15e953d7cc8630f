"""The agent workload: a verifiable task suite, concurrent agents, and the scored run.

`WorkloadSettings` says what to run; `run_workload` (async, one shared `httpx.AsyncClient`) or
`run_workload_sync` runs it against a server and returns a `tuner.records.WorkloadRecord`;
`run_throughput` is the plain benchmark beside it; `describe_suite` measures the suite's shape.
"""

from __future__ import annotations

from tuner.workload.describe import Spread, SuiteStats, describe_suite
from tuner.workload.replay import ReplayScript, ReplayTurn, load_traces, script_for_task
from tuner.workload.reuse import REUSE_CLASSES, classify_reuse
from tuner.workload.runner import (
    RunProgress,
    make_client,
    normalise_base_url,
    run_workload,
    run_workload_sync,
)
from tuner.workload.settings import WorkloadSettings
from tuner.workload.shape import SuiteShape
from tuner.workload.tasks import (
    CheckResult,
    OracleStep,
    Task,
    TaskWorld,
    build_task_set,
    check_task,
    generate_task,
    task_set_hash,
)
from tuner.workload.throughput import run_throughput, run_throughput_sync
from tuner.workload.tokens import TokenCounter, estimate_tokens

__all__ = [
    "REUSE_CLASSES",
    "CheckResult",
    "OracleStep",
    "ReplayScript",
    "ReplayTurn",
    "RunProgress",
    "Spread",
    "SuiteShape",
    "SuiteStats",
    "Task",
    "TaskWorld",
    "TokenCounter",
    "WorkloadSettings",
    "build_task_set",
    "check_task",
    "classify_reuse",
    "describe_suite",
    "estimate_tokens",
    "generate_task",
    "load_traces",
    "make_client",
    "normalise_base_url",
    "run_throughput",
    "run_throughput_sync",
    "run_workload",
    "run_workload_sync",
    "script_for_task",
    "task_set_hash",
]
