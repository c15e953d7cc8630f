"""Frozen records that cross boundaries: what a worker measured, handed to the driver to store.

Workers build these; `tuner.storage` turns them into rows; nothing here knows about SQL.
Every optional measurement is `None` when it was not measured (never zero).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "Score",
    "ServerCounters",
    "ServerStartRecord",
    "StartupFacts",
    "StepRecord",
    "TaskRecord",
    "ThroughputRecord",
    "WorkloadRecord",
    "acceptance_rate",
    "mean_acceptance_length",
]


def acceptance_rate(draft_tokens: int | None, accepted: int | None) -> float | None:
    """Accepted / proposed draft tokens; None when nothing was proposed (undefined, not 0)."""
    if not draft_tokens or accepted is None:
        return None
    return accepted / draft_tokens


def mean_acceptance_length(drafts: int | None, accepted: int | None) -> float | None:
    """1 + accepted tokens per draft (vLLM's definition); None without drafts."""
    if not drafts or accepted is None:
        return None
    return 1.0 + accepted / drafts


@dataclass(frozen=True)
class StartupFacts:
    """What a vLLM server became, read from its log and /metrics."""

    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    model_load_gib: float | None = None
    model_load_seconds: float | None = None
    available_kv_gib: float | None = None
    graph_capture_gib: float | None = None
    graph_capture_seconds: float | None = None
    engine_init_seconds: float | None = None
    startup_seconds: float | None = None
    vllm_version: str | None = None
    # The start's parts beside load, graph capture and engine init: torch.compile (all of a
    # server's compiled models together: MTP's drafter is a second one), whether every compiled
    # graph came from vLLM's compile cache, and the first profiling run (Triton JIT and
    # autotuning happen there on a GPU).
    compile_seconds: float | None = None
    compile_cache_hit: bool | None = None
    profile_seconds: float | None = None


@dataclass(frozen=True)
class ServerStartRecord:
    """One attempt to start a server for a trial, successful or not."""

    argv: tuple[str, ...]
    env: dict[str, str]
    log_path: str
    attempt: int = 0
    started_at: float = 0.0
    ended_at: float | None = None
    exit_status: int | None = None
    failure_kind: str | None = None
    failure_message: str | None = None
    failure_excerpt: str | None = None
    failure_details: dict[str, Any] = field(default_factory=dict)
    facts: StartupFacts = field(default_factory=StartupFacts)


@dataclass(frozen=True)
class StepRecord:
    """One model call of one task."""

    step: int
    prompt_tokens: int
    cached_tokens: int | None
    output_tokens: int
    ttft_s: float | None
    latency_s: float
    reuse_class: str  # "all" | "one_block_short" | "partial" | "none" | "first"


@dataclass(frozen=True)
class TaskRecord:
    """One task: its outcome and its steps."""

    index: int
    task_id: str
    template: str
    seed: int
    warmup: bool
    success: bool
    failure_reason: str | None
    started_s: float
    wall_s: float
    steps: tuple[StepRecord, ...] = ()

    @property
    def prompt_tokens(self) -> int:
        """Prompt tokens over all steps."""
        return sum(s.prompt_tokens for s in self.steps)

    @property
    def output_tokens(self) -> int:
        """Output tokens over all steps."""
        return sum(s.output_tokens for s in self.steps)


class _Acceptance:
    """Speculative acceptance derived from a record's draft counters (None without drafts)."""

    spec_drafts: int | None
    spec_draft_tokens: int | None
    spec_accepted_tokens: int | None

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / proposed draft tokens."""
        return acceptance_rate(self.spec_draft_tokens, self.spec_accepted_tokens)

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted tokens per draft (vLLM's definition)."""
        return mean_acceptance_length(self.spec_drafts, self.spec_accepted_tokens)


@dataclass(frozen=True)
class Score:
    """What `tuner.metrics.score_tasks` computes from the scored tasks of one run (None: not
    measured)."""

    tasks: int
    successes: int
    scored_wall_s: float
    tasks_per_hour: float
    tasks_per_hour_low: float
    tasks_per_hour_high: float
    success_rate: float
    success_rate_low: float
    success_rate_high: float
    ttft_p50: float | None = None
    ttft_p90: float | None = None
    ttft_p99: float | None = None
    tpot_p50: float | None = None
    tpot_p90: float | None = None
    tpot_p99: float | None = None
    itl_p50: float | None = None
    itl_p90: float | None = None
    itl_p99: float | None = None
    output_tokens_per_s: float | None = None
    energy_joules: float | None = None
    joules_per_task: float | None = None
    joules_per_token: float | None = None


@dataclass(frozen=True)
class ServerCounters(_Acceptance):
    """Counter deltas over the scored window (None: the server does not export it)."""

    prefix_cache_queries: int | None = None
    prefix_cache_hits: int | None = None
    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_accepted_per_pos: tuple[int, ...] | None = None
    preemptions: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None

    @property
    def prefix_cache_hit_ratio(self) -> float | None:
        """Prefix-cache hit tokens / queried tokens over the window.

        With prefix caching off vLLM exports both counters but never queries the cache: prompt
        tokens were served and none came from a cache, so the ratio is 0.0 (measured).
        """
        if self.prefix_cache_hits is None or self.prefix_cache_queries is None:
            return None
        if self.prefix_cache_queries > 0:
            return self.prefix_cache_hits / self.prefix_cache_queries
        return 0.0 if self.prompt_tokens else None


@dataclass(frozen=True, kw_only=True)
class WorkloadRecord(Score, _Acceptance):
    """One scored workload run against one server: its `Score` and the run's diagnostics."""

    mode: str
    task_set_hash: str
    seed: int
    agents: int
    prefix_cache_hit_ratio: float | None = None
    spec_drafts: int | None = None
    spec_draft_tokens: int | None = None
    spec_accepted_tokens: int | None = None
    spec_accepted_per_pos: tuple[int, ...] | None = None
    preemptions: int | None = None
    prompt_tokens: int | None = None
    generation_tokens: int | None = None
    gpu_memory_used_mib: float | None = None  # NVML, summed over the server's GPUs, at window end
    task_records: tuple[TaskRecord, ...] = ()

    @classmethod
    def from_score(
        cls,
        score: Score,
        *,
        mode: str,
        task_set_hash: str,
        seed: int,
        agents: int,
        task_records: Iterable[TaskRecord] = (),
        counters: ServerCounters | None = None,
        **diagnostics: Any,
    ) -> WorkloadRecord:
        """The record of a run: every field of its `Score`, the server's counter deltas over
        the window, and further diagnostics by name (e.g. `gpu_memory_used_mib`), which win
        over the score's."""
        values: dict[str, Any] = {f.name: getattr(score, f.name) for f in fields(score)}
        if counters is not None:
            values |= {name: getattr(counters, name) for name in _COUNTER_FIELDS}
        values |= diagnostics
        return cls(
            mode=mode,
            task_set_hash=task_set_hash,
            seed=seed,
            agents=agents,
            task_records=tuple(task_records),
            **values,
        )


# `ServerCounters` values a WorkloadRecord keeps (the hit ratio is derived from two counters).
_COUNTER_FIELDS = (
    "prefix_cache_hit_ratio",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "spec_accepted_per_pos",
    "preemptions",
    "prompt_tokens",
    "generation_tokens",
)


@dataclass(frozen=True)
class ThroughputRecord:
    """The plain benchmark: output tokens/s at a fixed number of concurrent streams."""

    streams: int
    requests: int
    output_tokens: int
    wall_s: float

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens per second over the whole run."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0
