"""What one workload run does: mode, task count, agents, seeds, protocol and suite shape."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tuner.metrics.guards import AcceptanceGuardSettings
from tuner.workload.shape import SuiteShape

__all__ = ["WorkloadSettings"]


class WorkloadSettings(BaseModel):
    """Options of one workload run (user input: frozen, unknown keys rejected).

    Attributes:
        mode: "live" (the model picks tool calls; the checker grades) or "replay" (the harness
            plays the oracle script with forced turn lengths; success = answered in time).
        tasks: Scored tasks, taken in fixed order from the suite (a cap when replaying traces).
        agents: Closed-loop agents running at once.
        warmup_tasks: Tasks run before the scored window (generated from another seed).
        seed: Seed of the task set; the same seed and shape give the same tasks, byte for byte.
        tool_protocol: "tools" (OpenAI `tools`, needs a server tool parser in live mode) or
            "text" (one JSON action in a fenced block, for servers without a tool parser).
        request_options: Merged into every request body, e.g.
            `{"chat_template_kwargs": {"enable_thinking": false}}`.
        tool_latency_s: Median simulated tool latency (lognormal, p99 = 12x the median, so
            3 s at the realistic 0.25 s); 0 disables it.
        task_deadline_s: A task not finished by then fails ("deadline").
        block_size: KV cache block size for reuse classes; None reads it from the server's
            `vllm:cache_config_info` (16 when the server does not say).
        max_live_steps: Live mode's step limit; None allows twice the oracle's steps.
        traces: A JSONL file of recorded conversations to replay instead of the generated suite.
        shape: Sizes of the generated suite.
        acceptance_guard: When a speculative server's acceptance collapses during the scored
            window, stop the trial (tuner.metrics.guards).
        measured_scored_s: The shortest scored window this workload took on the preset's
            hardware, measured (the preset says where). Preflight's sizing check bounds the
            window by tool waits alone; a workload bounded by long prefills instead (the
            published shape: prompts to 15k tokens) states its measured window here, and
            the check accepts it when it is at least 60 s. None: tool waits decide.
        separating_tasks: The fewest scored tasks this preset showed to separate the
            differences it exists to measure beyond its between-run noise (the preset says
            how); with `measured_scored_s` it replaces preflight's two proxies for that (24
            tasks, 60 s of window). At least 2 per agent.
        warmup_max_sweeps: Shape sweeps after the warm-up tasks, at most (they stop earlier
            once steady; `tuner.workload.warmup.warm_shapes`). A calibrated study lowers it
            where a sweep is long against its scored window (`tuner.workload.calibration`):
            one sweep still meets every batch shape and prompt length once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["live", "replay"] = "replay"
    tasks: int = Field(default=192, ge=1)
    agents: int = Field(default=4, ge=1)
    warmup_tasks: int = Field(default=4, ge=0)
    seed: int = 0
    tool_protocol: Literal["tools", "text"] = "tools"
    request_options: dict[str, Any] = Field(default_factory=dict)
    tool_latency_s: float = Field(default=0.25, ge=0)
    task_deadline_s: float = Field(default=600.0, gt=0)
    block_size: int | None = Field(default=None, ge=1)
    max_live_steps: int | None = Field(default=None, ge=1)
    traces: str | None = None
    shape: SuiteShape = Field(default_factory=SuiteShape.default)
    acceptance_guard: AcceptanceGuardSettings = Field(default_factory=AcceptanceGuardSettings)
    measured_scored_s: float | None = Field(default=None, gt=0)
    separating_tasks: int | None = Field(default=None, ge=2)
    warmup_max_sweeps: int = Field(default=3, ge=1)

    @property
    def warmup_seed(self) -> int:
        """The seed warm-up tasks come from (never overlaps the scored set's seeds)."""
        return self.seed + 7_919_000
