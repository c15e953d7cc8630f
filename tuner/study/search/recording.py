"""Turn a worker's `TrialResult` into database rows, Optuna user attributes and a `tell`.

Only the driver calls this. Rows are written first, in one transaction, then the trial is
told: a driver killed in between leaves a RUNNING trial, which the next run marks interrupted
and whose rows it deletes (`tuner.study.search.resume.repair`), so nothing is counted twice. Without
a `Store` (a simulated study in memory) only Optuna hears of the result.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from tuner.attrs import TrialAttr
from tuner.server.facts import HybridCache, parse_hybrid_cache, start_parts
from tuner.storage import Store, TrialMeasurements
from tuner.workload.reuse import count_reuse

if TYPE_CHECKING:
    from tuner.study.trial.request import TrialResult

__all__ = ["CONSTRAINT_NAME", "measurement_attrs", "record_result"]

CONSTRAINT_NAME = "fits_on_card"


def measurement_attrs(result: TrialResult) -> dict[str, Any]:  # noqa: C901 (one if per optional field)
    """The user attributes optuna-dashboard shows for a trial."""
    attrs: dict[str, Any] = {
        TrialAttr.SERVER_SPEC: result.spec.model_dump(mode="json"),
        TrialAttr.SERVE_COMMAND: result.spec.serve_command(),
        TrialAttr.INFEASIBLE: result.infeasible,
        TrialAttr.TIMING: {
            "worker_wall_s": round(result.wall_s, 3),
            "startup_s": round(result.startup_s, 3),
            "workload_s": round(result.workload_s, 3),
            "throughput_s": round(result.throughput_s, 3),
        },
    }
    if result.max_num_seqs_requested is not None:
        attrs[TrialAttr.MAX_NUM_SEQS_REQUESTED] = result.max_num_seqs_requested
    if result.max_num_seqs_clamped is not None:
        attrs[TrialAttr.MAX_NUM_SEQS_CLAMPED] = result.max_num_seqs_clamped
    if result.failure_kind:
        attrs[TrialAttr.FAILURE_KIND] = result.failure_kind
        attrs[TrialAttr.FAILURE_REASON] = result.failure_reason
    if result.notes:
        attrs[TrialAttr.NOTES] = list(result.notes)
    if result.spec.load_format == "dummy":
        attrs[TrialAttr.DUMMY_WEIGHTS] = True
    if result.server_starts:
        last = result.server_starts[-1]
        facts = last.facts
        if facts.kv_cache_tokens is not None:
            attrs[TrialAttr.KV_CACHE_TOKENS] = facts.kv_cache_tokens
        if facts.startup_seconds is not None:
            attrs[TrialAttr.STARTUP_S] = round(facts.startup_seconds, 2)
        if parts := start_parts(facts):
            attrs[TrialAttr.START_PARTS] = parts
        hybrid = _hybrid_cache(last.log_path)
        block = facts.block_size or hybrid.attention_block_size
        if block is not None:
            attrs[TrialAttr.BLOCK_SIZE] = block
        if hybrid.mamba_cache_mode is not None:
            attrs[TrialAttr.MAMBA_CACHE_MODE] = hybrid.mamba_cache_mode
    w = result.workload
    if w is not None:
        attrs.update(
            {
                TrialAttr.TASKS_PER_HOUR: round(w.tasks_per_hour, 2),
                TrialAttr.TASKS_PER_HOUR_LOW: round(w.tasks_per_hour_low, 2),
                TrialAttr.TASKS_PER_HOUR_HIGH: round(w.tasks_per_hour_high, 2),
                TrialAttr.SUCCESS_RATE: round(w.success_rate, 4),
                TrialAttr.PREEMPTIONS: w.preemptions,
            }
        )
        if w.prefix_cache_hit_ratio is not None:
            attrs[TrialAttr.CACHE_HIT_PCT] = round(100 * w.prefix_cache_hit_ratio, 2)
        if w.acceptance_rate is not None:
            attrs[TrialAttr.ACCEPTANCE_RATE] = round(w.acceptance_rate, 4)
        if w.mean_acceptance_length is not None:
            attrs[TrialAttr.MEAN_ACCEPTANCE_LENGTH] = round(w.mean_acceptance_length, 3)
        if w.gpu_memory_used_mib is not None:
            attrs[TrialAttr.GPU_MEMORY_MIB] = round(w.gpu_memory_used_mib, 1)
        if w.joules_per_task is not None:
            attrs[TrialAttr.ENERGY_PER_TASK_J] = round(w.joules_per_task, 2)
        if result.pruned:
            attrs[TrialAttr.PRUNED_AT_TASKS] = w.tasks
        if w.task_records:
            attrs[TrialAttr.REUSE] = count_reuse(
                s.reuse_class for task in w.task_records if not task.warmup for s in task.steps
            )
    if result.probe is not None:
        attrs[TrialAttr.PROBE] = result.probe.to_json()
    return attrs


def _hybrid_cache(log_path: str) -> HybridCache:
    """What the server's log says of its hybrid cache; nothing when the log is not readable
    here (a worker on another host keeps its own logs)."""
    try:
        return parse_hybrid_cache(Path(log_path).read_text(errors="replace"))
    except OSError:
        return HybridCache()


def _test_kill_point(name: str) -> None:
    """Tests SIGKILL the driver here (TUNER_TEST_SIGKILL_AT=name) to check the resume."""
    if os.environ.get("TUNER_TEST_SIGKILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def record_result(
    study: optuna.Study, trial: optuna.Trial, store: Store | None, result: TrialResult
) -> TrialState:
    """Store the result's rows, set its attributes and tell Optuna; returns the final state."""
    if store is not None:
        store.save_trial(
            study.study_name,
            trial.number,
            TrialMeasurements(result.server_starts, result.workload, result.throughput),
        )
    _test_kill_point("stored")
    for key, value in measurement_attrs(result).items():
        trial.set_user_attr(key, value)
    # Positive means "cannot run on this card": the sampler steers away from such configs.
    trial.set_constraint(CONSTRAINT_NAME, 1.0 if result.infeasible else 0.0)
    if result.infeasible:
        # Feasibility is learnt through the constraint; the value only has to rank it last.
        study.tell(trial, 0.0)
        return TrialState.COMPLETE
    if result.workload is None or result.failure_kind:
        study.tell(trial, state=TrialState.FAIL)
        return TrialState.FAIL
    if result.pruned:
        study.tell(trial, state=TrialState.PRUNED)
        return TrialState.PRUNED
    study.tell(trial, result.workload.tasks_per_hour)
    return TrialState.COMPLETE
