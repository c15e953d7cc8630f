"""Our tables, beside Optuna's in the same database (SQLAlchemy 2.0 declarative models).

Rows are keyed by study name and Optuna trial number so that a row outlives nothing it points to
and reads without Optuna's schema. Columns change only through Alembic migrations (`alembic/`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, DateTime, Float, ForeignKey, Integer, String, Text, func
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    MappedColumn,
    Relationship,
    mapped_column,
    relationship,
)

__all__ = [
    "Base",
    "ServerStartRow",
    "StartMeasured",
    "StepRow",
    "TaskResultRow",
    "ThroughputRunRow",
    "TrialKeyed",
    "WorkloadRunRow",
]


class Base(DeclarativeBase):
    """Declarative base for tuner's own tables (Optuna keeps its own metadata)."""


# The columns the mixins below add come first in each table, in this order, as the migrations
# created them (`sort_order`: the ORM otherwise puts a class's own columns before its mixins').


class _Keyed:
    """Every table's surrogate key."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, sort_order=-3)


class TrialKeyed(_Keyed):
    """A row of one trial of a study, by name and Optuna trial number (None: of no trial)."""

    study_name: Mapped[str] = mapped_column(String(512), index=True, sort_order=-2)
    trial_number: Mapped[int | None] = mapped_column(Integer, index=True, sort_order=-2)


class StartMeasured(TrialKeyed):
    """A trial's measurement on one server start (kept, unlinked, if that start's row goes)."""

    server_start_id: Mapped[int | None] = mapped_column(
        ForeignKey("tuner_server_starts.id", ondelete="SET NULL"), sort_order=-1
    )


def _children(back_populates: str, order_by: str) -> Relationship[Any]:
    """A row's child rows, in `order_by`; the ORM deletes them with it (on every backend)."""
    return relationship(
        back_populates=back_populates, cascade="all, delete-orphan", order_by=order_by
    )


def _parent_id(table: str) -> MappedColumn[Any]:
    """A child row's key of its parent row in `table`: the database deletes it with its parent."""
    return mapped_column(ForeignKey(f"{table}.id", ondelete="CASCADE"), index=True)


class ServerStartRow(TrialKeyed, Base):
    """One attempt to start `vllm serve` for a trial."""

    __tablename__ = "tuner_server_starts"

    attempt: Mapped[int] = mapped_column(Integer, default=0)
    argv: Mapped[list[str]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    started_at: Mapped[datetime | None] = mapped_column(DateTime)
    ended_at: Mapped[datetime | None] = mapped_column(DateTime)
    exit_status: Mapped[int | None] = mapped_column(Integer)
    failure_kind: Mapped[str | None] = mapped_column(String(64))
    failure_message: Mapped[str | None] = mapped_column(Text)
    failure_excerpt: Mapped[str | None] = mapped_column(Text)
    failure_details: Mapped[dict[str, object] | None] = mapped_column(JSON)
    log_path: Mapped[str] = mapped_column(Text)
    kv_cache_tokens: Mapped[int | None] = mapped_column(Integer)
    max_concurrency: Mapped[float | None] = mapped_column(Float)
    num_gpu_blocks: Mapped[int | None] = mapped_column(Integer)
    block_size: Mapped[int | None] = mapped_column(Integer)
    model_load_gib: Mapped[float | None] = mapped_column(Float)
    model_load_seconds: Mapped[float | None] = mapped_column(Float)
    available_kv_gib: Mapped[float | None] = mapped_column(Float)
    graph_capture_gib: Mapped[float | None] = mapped_column(Float)
    graph_capture_seconds: Mapped[float | None] = mapped_column(Float)
    engine_init_seconds: Mapped[float | None] = mapped_column(Float)
    startup_seconds: Mapped[float | None] = mapped_column(Float)
    vllm_version: Mapped[str | None] = mapped_column(String(64))
    compile_seconds: Mapped[float | None] = mapped_column(Float)
    compile_cache_hit: Mapped[bool | None] = mapped_column(Boolean)
    profile_seconds: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, server_default=func.now())


class WorkloadRunRow(StartMeasured, Base):
    """One scored workload run against one server start."""

    __tablename__ = "tuner_workload_runs"

    mode: Mapped[str] = mapped_column(String(16))
    task_set_hash: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int] = mapped_column(Integer)
    agents: Mapped[int] = mapped_column(Integer)
    tasks: Mapped[int] = mapped_column(Integer)
    successes: Mapped[int] = mapped_column(Integer)
    scored_wall_s: Mapped[float] = mapped_column(Float)
    tasks_per_hour: Mapped[float] = mapped_column(Float)
    tasks_per_hour_low: Mapped[float] = mapped_column(Float)
    tasks_per_hour_high: Mapped[float] = mapped_column(Float)
    success_rate: Mapped[float] = mapped_column(Float)
    success_rate_low: Mapped[float] = mapped_column(Float)
    success_rate_high: Mapped[float] = mapped_column(Float)
    prefix_cache_hit_ratio: Mapped[float | None] = mapped_column(Float)
    spec_drafts: Mapped[int | None] = mapped_column(Integer)
    spec_draft_tokens: Mapped[int | None] = mapped_column(Integer)
    spec_accepted_tokens: Mapped[int | None] = mapped_column(Integer)
    spec_accepted_per_pos: Mapped[list[int] | None] = mapped_column(JSON)
    preemptions: Mapped[int | None] = mapped_column(Integer)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    generation_tokens: Mapped[int | None] = mapped_column(Integer)
    energy_joules: Mapped[float | None] = mapped_column(Float)
    ttft_p50: Mapped[float | None] = mapped_column(Float)
    ttft_p90: Mapped[float | None] = mapped_column(Float)
    ttft_p99: Mapped[float | None] = mapped_column(Float)
    tpot_p50: Mapped[float | None] = mapped_column(Float)
    tpot_p90: Mapped[float | None] = mapped_column(Float)
    tpot_p99: Mapped[float | None] = mapped_column(Float)
    itl_p50: Mapped[float | None] = mapped_column(Float)
    itl_p90: Mapped[float | None] = mapped_column(Float)
    itl_p99: Mapped[float | None] = mapped_column(Float)
    output_tokens_per_s: Mapped[float | None] = mapped_column(Float)
    joules_per_task: Mapped[float | None] = mapped_column(Float)
    joules_per_token: Mapped[float | None] = mapped_column(Float)
    gpu_memory_used_mib: Mapped[float | None] = mapped_column(Float)  # revision 0002
    created_at: Mapped[datetime] = mapped_column(DateTime, server_default=func.now())

    task_results: Mapped[list[TaskResultRow]] = _children("workload_run", "TaskResultRow.index")


class TaskResultRow(_Keyed, Base):
    """One task of a workload run."""

    __tablename__ = "tuner_task_results"

    workload_run_id: Mapped[int] = _parent_id("tuner_workload_runs")
    index: Mapped[int] = mapped_column(Integer)
    task_id: Mapped[str] = mapped_column(String(128))
    template: Mapped[str] = mapped_column(String(64))
    seed: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[bool] = mapped_column(Boolean)
    success: Mapped[bool] = mapped_column(Boolean)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    started_s: Mapped[float] = mapped_column(Float)
    wall_s: Mapped[float] = mapped_column(Float)
    num_steps: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)

    workload_run: Mapped[WorkloadRunRow] = relationship(back_populates="task_results")
    steps: Mapped[list[StepRow]] = _children("task_result", "StepRow.step")


class StepRow(_Keyed, Base):
    """One model call (step) of one task."""

    __tablename__ = "tuner_steps"

    task_result_id: Mapped[int] = _parent_id("tuner_task_results")
    step: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int | None] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    ttft_s: Mapped[float | None] = mapped_column(Float)
    latency_s: Mapped[float] = mapped_column(Float)
    reuse_class: Mapped[str] = mapped_column(String(32))

    task_result: Mapped[TaskResultRow] = relationship(back_populates="steps")


class ThroughputRunRow(StartMeasured, Base):
    """The plain benchmark (fixed output length, no cache help) for one server start."""

    __tablename__ = "tuner_throughput_runs"

    streams: Mapped[int] = mapped_column(Integer)
    requests: Mapped[int] = mapped_column(Integer)
    output_tokens: Mapped[int] = mapped_column(Integer)
    wall_s: Mapped[float] = mapped_column(Float)
    output_tokens_per_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(DateTime, server_default=func.now())
