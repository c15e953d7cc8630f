"""The shape of the agent suite: prefix, steps, tool outputs, turn sizes and context bound.

`SuiteShape()` is the realistic shape of docs/workload.md (measured on tau-bench and
mini-swe-agent traces) for a 16k-token window; `SuiteShape.cpu_small()` scales it down for
SmolLM2-135M on the 2-core CPU build so that a 12-task replay with 2 agents takes well under a
minute while the shared prefix still spans several 128-token KV blocks.
"""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["SuiteShape", "lognormal_sigma"]

_Z90 = 1.2815515655446004  # standard normal quantile at 0.90


def lognormal_sigma(median: float, p90: float) -> float:
    """The sigma of a lognormal with the given median and 90th percentile."""
    return math.log(p90 / median) / _Z90


class SuiteShape(BaseModel):
    """Sizes in tokens that shape every generated task (all counts are token estimates).

    Attributes:
        shared_prefix_tokens: The system prompt (policy and tool schemas), identical everywhere.
        steps_min, steps_max, steps_median, steps_sigma: Model calls per task (lognormal, clipped).
        tool_output_median_tokens, tool_output_p90_tokens, tool_output_max_tokens: Tool
            outputs (lognormal with this median and p90, clipped at the max).
        call_turn_min_tokens, call_turn_max_tokens: An assistant turn that calls a tool.
        plan_turn_min_tokens, plan_turn_max_tokens, plan_probability: Some tasks open with a
            plan and close with a summary of this size.
        max_context_tokens: Bound on a task's final context; tool outputs are clipped to fit.
        live_max_tokens: `max_tokens` of one assistant turn in live mode.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    shared_prefix_tokens: int = Field(default=4000, ge=200)
    steps_min: int = Field(default=8, ge=3)
    steps_max: int = Field(default=24, ge=3)
    steps_median: float = Field(default=12.0, gt=0)
    steps_sigma: float = Field(default=0.4, ge=0)
    tool_output_median_tokens: int = Field(default=150, ge=10)
    tool_output_p90_tokens: int = Field(default=500, ge=10)
    tool_output_max_tokens: int = Field(default=2000, ge=10)
    call_turn_min_tokens: int = Field(default=60, ge=1)
    call_turn_max_tokens: int = Field(default=120, ge=1)
    plan_turn_min_tokens: int = Field(default=300, ge=1)
    plan_turn_max_tokens: int = Field(default=600, ge=1)
    plan_probability: float = Field(default=0.25, ge=0, le=1)
    max_context_tokens: int = Field(default=14000, ge=512)
    live_max_tokens: int = Field(default=1024, ge=16)

    @model_validator(mode="after")
    def _ordered(self) -> SuiteShape:
        if self.steps_min > self.steps_max:
            raise ValueError("steps_min must not exceed steps_max")
        if self.tool_output_median_tokens >= self.tool_output_p90_tokens:
            raise ValueError("tool_output_median_tokens must be below tool_output_p90_tokens")
        if self.call_turn_min_tokens > self.call_turn_max_tokens:
            raise ValueError("call_turn_min_tokens must not exceed call_turn_max_tokens")
        if self.plan_turn_min_tokens > self.plan_turn_max_tokens:
            raise ValueError("plan_turn_min_tokens must not exceed plan_turn_max_tokens")
        if self.shared_prefix_tokens * 1.5 > self.max_context_tokens:
            raise ValueError("max_context_tokens leaves no room after the shared prefix")
        return self

    @classmethod
    def default(cls) -> SuiteShape:
        """The realistic shape of docs/workload.md (16k-token window)."""
        return cls()

    @classmethod
    def cpu_small(cls) -> SuiteShape:
        """The CPU shape for SmolLM2-135M (8k context, ~40 tokens/s for one stream on 2 cores).

        A shared prefix of about 1.1k tokens (the policy and tool list alone; 8 full 128-token
        CPU KV blocks, so prefix caching matters), 3-6 steps, short tool outputs (median about
        100 tokens: the bare results), tool-call turns of 16-48 tokens and a final context
        under 3k tokens.
        """
        return cls(
            shared_prefix_tokens=1024,
            steps_min=3,
            steps_max=6,
            steps_median=4.0,
            steps_sigma=0.3,
            tool_output_median_tokens=50,
            tool_output_p90_tokens=120,
            tool_output_max_tokens=300,
            call_turn_min_tokens=16,
            call_turn_max_tokens=48,
            plan_turn_min_tokens=48,
            plan_turn_max_tokens=96,
            plan_probability=0.15,
            max_context_tokens=3072,
            live_max_tokens=160,
        )

    @classmethod
    def named(cls, name: str) -> SuiteShape:
        """`default` or `cpu` (the CLI's `--shape`)."""
        if name == "default":
            return cls.default()
        if name in ("cpu", "cpu_small"):
            return cls.cpu_small()
        raise ValueError(f"unknown shape {name!r}: use 'default' or 'cpu'")

    def draw_steps(self, rng: random.Random) -> int:
        """Model calls for one task: lognormal around the median, clipped to [min, max]."""
        value = self.steps_median * math.exp(rng.gauss(0.0, 1.0) * self.steps_sigma)
        return min(self.steps_max, max(self.steps_min, round(value)))

    def draw_tool_output(self, rng: random.Random) -> int:
        """Target size of one tool output in tokens."""
        sigma = lognormal_sigma(self.tool_output_median_tokens, self.tool_output_p90_tokens)
        value = self.tool_output_median_tokens * math.exp(rng.gauss(0.0, 1.0) * sigma)
        return min(self.tool_output_max_tokens, max(1, round(value)))

    def draw_call_turn(self, rng: random.Random) -> int:
        """Target size of one tool-call assistant turn."""
        return rng.randint(self.call_turn_min_tokens, self.call_turn_max_tokens)

    def draw_plan_turn(self, rng: random.Random) -> int:
        """Target size of a plan or summary turn."""
        return rng.randint(self.plan_turn_min_tokens, self.plan_turn_max_tokens)
