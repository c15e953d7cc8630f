"""One agent working one task: the replay loop and the live loop, a StepRecord per model call.

Replay plays a script: each request forces the scripted turn's length (`max_tokens` =
`min_tokens`, `ignore_eos`), then the scripted turn and what follows it are appended; success is
every step answered before the deadline. Live lets the model choose: tool calls run against the
task's own environment copy, refused or unreadable calls come back as error results, the step
limit and context overflow fail the task, and the checker grades the end state and answer.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

import httpx

from tuner.records import StepRecord
from tuner.workload.chat import ChatResult, RequestFailed, stream_chat
from tuner.workload.envs import all_tools
from tuner.workload.prompt import (
    ActionError,
    openai_tools,
    parse_text_action,
    tool_result_message,
)
from tuner.workload.replay import ReplayScript, opening_messages
from tuner.workload.reuse import classify_reuse
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import Task, TaskWorld, check_task
from tuner.workload.tokens import TokenCounter

__all__ = ["AgentContext", "Outcome", "live_task", "replay_task"]

# Tool latency is lognormal with p99 = 12x the median (0.25 s -> 3 s, docs/workload.md).
_LATENCY_SIGMA = math.log(12.0) / 2.3263478740408408


@dataclass(frozen=True)
class AgentContext:
    """What every agent shares: the client, the server, the settings and how to count."""

    client: httpx.AsyncClient
    chat_url: str
    model: str
    settings: WorkloadSettings
    counter: TokenCounter
    block_size: int


@dataclass
class Outcome:
    """A task's result so far; kept when the deadline cancels the task mid-step."""

    success: bool = False
    failure_reason: str | None = None
    missed_deadline: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    gaps_s: list[float] = field(default_factory=list)
    previous_prompt: int | None = None

    def record(self, result: ChatResult, block_size: int) -> None:
        """Add the StepRecord of one answered request."""
        self.steps.append(
            StepRecord(
                step=len(self.steps),
                prompt_tokens=result.prompt_tokens,
                cached_tokens=result.cached_tokens,
                output_tokens=result.completion_tokens,
                ttft_s=result.ttft_s,
                latency_s=result.latency_s,
                reuse_class=classify_reuse(self.previous_prompt, result.cached_tokens, block_size),
            )
        )
        self.gaps_s.extend(result.gaps_s)
        self.previous_prompt = result.prompt_tokens


def _body(ctx: AgentContext, messages: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": ctx.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        **fields,
    }
    body.update(ctx.settings.request_options)
    return body


async def _tool_pause(ctx: AgentContext, rng: random.Random, calls: int) -> None:
    median = ctx.settings.tool_latency_s
    if median <= 0 or calls <= 0:
        return
    await asyncio.sleep(sum(median * math.exp(rng.gauss(0, _LATENCY_SIGMA)) for _ in range(calls)))


async def replay_task(ctx: AgentContext, script: ReplayScript, outcome: Outcome) -> None:
    """Play `script` turn by turn with forced lengths; fills `outcome`."""
    messages = list(script.head)
    rng = random.Random(f"latency/{script.seed}")
    extra: dict[str, Any] = {"ignore_eos": True}
    if script.tools:
        extra |= {"tools": list(script.tools), "tool_choice": "none"}
    for turn in script.turns:
        forced = max(1, ctx.counter.count(turn.text))
        body = _body(ctx, messages, max_tokens=forced, min_tokens=forced, **extra)
        try:
            result = await stream_chat(ctx.client, ctx.chat_url, body)
        except RequestFailed as exc:
            outcome.failure_reason = exc.reason
            return
        outcome.record(result, ctx.block_size)
        messages = [*messages, turn.assistant, *turn.followups]
        await _tool_pause(ctx, rng, turn.tool_calls)
    outcome.success = True


def _run_tool(world: TaskWorld, tool: str, arguments: dict[str, Any]) -> str:
    if tool not in {spec.name for spec in world.env.tools} and tool in {
        spec.name for spec in all_tools()
    }:
        return json.dumps({"error": f"{tool} does not apply to this {world.env.name} ticket"})
    return world.try_call(tool, arguments)


def _tools_turn(
    world: TaskWorld, result: ChatResult, step: int
) -> tuple[list[dict[str, Any]], int]:
    """The assistant message with its tool calls, then one result message per call."""
    ids = [str(c["id"] or f"call_{step}_{i}") for i, c in enumerate(result.tool_calls)]
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": c["name"], "arguments": c["arguments"] or "{}"},
        }
        for call_id, c in zip(ids, result.tool_calls, strict=True)
    ]
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": result.content, "tool_calls": calls}
    ]
    for call_id, c in zip(ids, result.tool_calls, strict=True):
        name = str(c["name"])
        try:
            arguments = json.loads(c["arguments"] or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
            output = _run_tool(world, name, arguments)
        except ValueError as exc:  # JSONDecodeError is a ValueError
            output = json.dumps({"error": f"unreadable arguments: {exc}"})
        messages.append(tool_result_message("tools", call_id, name, output))
    return messages, len(calls)


async def live_task(ctx: AgentContext, task: Task, outcome: Outcome) -> None:
    """Let the model work `task`; the checker grades the result. Fills `outcome`."""
    settings = ctx.settings
    world = TaskWorld(task)
    messages = opening_messages(task, settings)
    rng = random.Random(f"latency/{task.seed}")
    extra: dict[str, Any] = {"max_tokens": settings.shape.live_max_tokens}
    if settings.tool_protocol == "tools":
        extra |= {"tools": openai_tools(), "tool_choice": "auto"}
    limit = settings.max_live_steps or 2 * len(task.steps)
    for step in range(limit):
        try:
            result = await stream_chat(ctx.client, ctx.chat_url, _body(ctx, messages, **extra))
        except RequestFailed as exc:
            outcome.failure_reason = exc.reason
            return
        outcome.record(result, ctx.block_size)
        if settings.tool_protocol == "tools":
            if not result.tool_calls:
                break
            new, calls = _tools_turn(world, result, step)
        else:
            reply = {"role": "assistant", "content": result.content}
            try:
                action = parse_text_action(result.content)
            except ActionError as exc:
                error = json.dumps({"error": str(exc)})
                new, calls = [reply, tool_result_message("text", "", "your action", error)], 0
            else:
                if action is None:
                    break
                output = _run_tool(world, action.tool, action.arguments)
                new, calls = [reply, tool_result_message("text", "", action.tool, output)], 1
        messages = [*messages, *new]
        used = result.prompt_tokens + result.completion_tokens
        if used >= settings.shape.max_context_tokens:
            outcome.failure_reason = (
                f"context_overflow: the conversation reached {used} tokens, the suite's "
                f"max_context_tokens is {settings.shape.max_context_tokens}"
            )
            return
        await _tool_pause(ctx, rng, calls)
    else:
        outcome.failure_reason = f"step_limit: {limit} model calls without a final answer"
        return
    verdict = check_task(task, world.state, result.content)
    outcome.success = verdict.ok
    outcome.failure_reason = verdict.reason
