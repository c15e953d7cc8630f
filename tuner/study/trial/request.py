"""The values one trial crosses the Ray boundary with: the frozen `TrialRequest` a worker is
given and the frozen `TrialResult` it returns (with the plain benchmark's `ThroughputPlan`).

`tuner.study.trial.evaluate.evaluate` takes the one and returns the other; the search builds
requests (`tuner.study.search`), and records results; a backend only carries them. The load
sweep (`tuner.study.stages.load_sweep`) builds requests with `loads`: several workloads in turn on
the one server, one record each back in `TrialResult.loads`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tuner.records import ServerStartRecord, ThroughputRecord, WorkloadRecord
from tuner.server import ServerSpec
from tuner.workload import WorkloadSettings
from tuner.workload.calibration import Calibration, SizingPlan
from tuner.workload.correctness_probe import ProbeResult

__all__ = ["ThroughputPlan", "TrialRequest", "TrialResult"]


@dataclass(frozen=True)
class ThroughputPlan:
    """The plain benchmark to run after the workload (empty streams: not measured)."""

    streams: tuple[int, ...] = (1, 8)
    requests: int = 8
    output_tokens: int = 128
    prompt_tokens: int = 256


@dataclass(frozen=True)
class TrialRequest:
    """Everything a worker needs to evaluate one candidate."""

    study_name: str
    trial_number: int
    params: dict[str, Any]
    spec: ServerSpec
    workload: WorkloadSettings
    cache_dir: str
    startup_timeout_s: float = 1800.0
    throughput: ThroughputPlan = field(default_factory=ThroughputPlan)
    tokenizer: str | None = None
    gpu_ids: tuple[int, ...] = ()
    # The study's sizing is not chosen yet: measure this server's speeds once it is ready and
    # run the scored workload at the size they pick (tuner.workload.calibration).
    sizing: SizingPlan | None = None
    # A load sweep's server: run these workloads on it in turn, in this order, instead of
    # `workload` (no calibration, no correctness probe, no plain benchmark); the first that
    # fails ends the trial (`tuner.study.trial.loads`).
    loads: tuple[WorkloadSettings, ...] = ()


@dataclass(frozen=True)
class TrialResult:
    """What one evaluation measured (or why it could not)."""

    trial_number: int
    spec: ServerSpec
    server_starts: tuple[ServerStartRecord, ...] = ()
    workload: WorkloadRecord | None = None
    throughput: tuple[ThroughputRecord, ...] = ()
    failure_kind: str | None = None
    failure_reason: str | None = None
    infeasible: bool = False
    pruned: bool = False
    max_num_seqs_requested: int | None = None
    max_num_seqs_clamped: int | None = None
    wall_s: float = 0.0
    startup_s: float = 0.0
    workload_s: float = 0.0
    throughput_s: float = 0.0
    probe: ProbeResult | None = None  # greedy answers to the correctness probe
    notes: tuple[str, ...] = ()  # errors after the workload finished; the score stands
    calibration: Calibration | None = None  # the sizing this trial chose (request.sizing)
    node_id: str | None = None  # the Ray node that ran it (set by the Ray worker)
    # One record per load of `TrialRequest.loads` that measured, in order (fewer than asked
    # when one failed: `failure_kind` says why).
    loads: tuple[WorkloadRecord, ...] = ()
