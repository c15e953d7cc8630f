"""The warm-up's shape sweeps: every concurrency level the scored window will meet, at the
workload's prompt lengths, until the server runs at a steady rate.

The first time a server meets a batch shape or a prompt length it pays for it (kernel selection
and allocation on the CPU build, allocator growth, compile caches that fill as new shapes are
met), so a scored window that met them first would measure the server's first contact as much
as the config. `tuner.workload.runner` runs `warm_shapes` after the warm-up tasks, unless
`warmup_tasks` is 0; `sweep_tokens` says what one sweep sends (the calibration's bound).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

import httpx

from tuner.errors import WorkloadError
from tuner.workload.agent import AgentContext
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tokens import TokenCounter

__all__ = [
    "MAX_SWEEPS",
    "STEADY_TOLERANCE",
    "WARM_OUTPUT_TOKENS",
    "SweepActivity",
    "WarmupSweeps",
    "sweep_tokens",
    "warm_levels",
    "warm_shapes",
]


# Shape sweeps after the warm-up tasks: at least 2 (to see a steady rate), at most MAX_SWEEPS
# (`WorkloadSettings.warmup_max_sweeps`, which a calibration may lower to 1 on a slow box);
# they stop once a sweep's token rate is within STEADY_TOLERANCE of the one before. Each sweep
# sends 1 + 2 + ... + levels requests of WARM_OUTPUT_TOKENS output tokens; on the CPU preset
# (2 agents, contexts under 3k tokens) a sweep is 3 requests and about 7,500 prompt tokens: a
# few seconds on a Zen 4 in bf16, about 23 s on a Zen 3 in fp32.
MAX_SWEEPS = 3
STEADY_TOLERANCE = 0.10
WARM_OUTPUT_TOKENS = 16
# Beyond this many agents the levels are the powers of two and `agents` itself (batch shapes
# a GPU build captures are of that kind), so a 64-agent warm-up stays 7 levels.
_ALL_LEVELS_UP_TO = 8
_FILLER = "Warm-up text to reach the workload's prompt lengths; it is never scored. "


class SweepActivity(Protocol):
    """Where `warm_shapes` says which sweep it is on (the runner's activity line reads it)."""

    sweep: int
    max_sweeps: int


@dataclass(frozen=True)
class WarmupSweeps:
    """What the shape sweeps did: tokens per second of each sweep, and refusals."""

    rates: tuple[float, ...] = ()
    refused: int = 0

    @property
    def steady(self) -> bool:
        """True when the last two sweeps ran within `STEADY_TOLERANCE` of each other."""
        return len(self.rates) >= 2 and _close(self.rates[-2], self.rates[-1])


def _close(a: float, b: float) -> bool:
    return a > 0 and abs(b - a) / a <= STEADY_TOLERANCE


def warm_levels(agents: int) -> list[int]:
    """The concurrency levels a warm-up sweep covers: 1..agents (powers of two beyond 8)."""
    if agents <= _ALL_LEVELS_UP_TO:
        return list(range(1, agents + 1))
    levels = [1 << i for i in range(agents.bit_length()) if 1 << i < agents]
    return [*levels, agents]


def _filler(counter: TokenCounter, tokens: int) -> str:
    """Text of about `tokens` tokens (never more) under `counter`."""
    per = max(1, counter.count(_FILLER))
    text = _FILLER * max(1, tokens // per)
    while len(text) > len(_FILLER) and counter.count(text) > tokens:
        text = text[: -len(_FILLER)]
    return text


def _longest_warm_prompt(settings: WorkloadSettings) -> int:
    return max(64, settings.shape.max_context_tokens - WARM_OUTPUT_TOKENS - 64)


def sweep_tokens(settings: WorkloadSettings) -> tuple[int, int]:
    """(prompt tokens, output tokens) one shape sweep of `warm_shapes` sends: level c sends c
    prompts of longest x (j + 1) / c tokens, each with WARM_OUTPUT_TOKENS forced tokens."""
    longest = _longest_warm_prompt(settings)
    levels = warm_levels(settings.agents)
    prompts = sum(longest * (j + 1) // c for c in levels for j in range(c))
    return prompts, WARM_OUTPUT_TOKENS * sum(levels)


async def warm_shapes(
    ctx: AgentContext, activity: SweepActivity | None = None, answered_before: int = 0
) -> WarmupSweeps:
    """Shape sweeps until the server runs at a steady rate (see the module docstring).

    Each level c sends c requests at once whose prompts spread from 1/c of the workload's
    longest context up to all of it, each with a fresh first line (no prefix-cache hit), and
    `WARM_OUTPUT_TOKENS` forced output tokens. A refused request (e.g. a prompt beyond this
    server's limit) is counted, not raised: the warm-up is best effort.

    Raises:
        WorkloadError: The server stopped answering; its `answered_requests` counts the
            requests answered before, the warm-up tasks' (`answered_before`) and the sweeps'.
    """
    settings = ctx.settings
    longest = _longest_warm_prompt(settings)
    levels = warm_levels(settings.agents)
    # Sweep requests the server answered so far: a server that dies at the first one died at
    # its first request (an infeasible config, `tuner.server.crashes.server_death`), however
    # its death reaches the client (HTTP 500, or the connection dropped).
    answered = [answered_before]

    async def one(tokens: int) -> tuple[int, bool]:
        messages = [
            {
                "role": "system",
                "content": f"Session {uuid.uuid4().hex}.\n" + _filler(ctx.counter, tokens),
            },
            {"role": "user", "content": "Continue."},
        ]
        body = {
            **settings.request_options,
            "model": ctx.model,
            "messages": messages,
            "max_tokens": WARM_OUTPUT_TOKENS,
            "min_tokens": WARM_OUTPUT_TOKENS,
            "ignore_eos": True,
            "temperature": 0.0,
            # Streamed, as the agents' requests are: the same serving path gets warm.
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        try:
            async with ctx.client.stream("POST", ctx.chat_url, json=body) as response:
                if response.status_code != 200:
                    await response.aread()
                    return 0, False
                tokens = 0
                async for line in response.aiter_lines():
                    if line.startswith("data: {") and '"usage"' in line:
                        usage = json.loads(line[len("data: ") :]).get("usage") or {}
                        tokens = int(usage.get("prompt_tokens") or 0) + int(
                            usage.get("completion_tokens") or 0
                        )
        except httpx.TransportError as exc:
            raise WorkloadError(
                f"the server at {ctx.chat_url} stopped answering in the warm-up after "
                f"{answered[0]} answered requests: {type(exc).__name__}: {exc}",
                answered_requests=answered[0],
            ) from exc
        except (ValueError, httpx.HTTPError):
            return 0, False  # an answer it could not read: the warm-up is best effort
        answered[0] += 1
        return tokens, True

    rates: list[float] = []
    refused = 0
    most = min(MAX_SWEEPS, settings.warmup_max_sweeps)
    for sweep in range(most):
        if activity is not None:
            activity.sweep, activity.max_sweeps = sweep + 1, most
        t0 = time.perf_counter()
        tokens = 0
        for c in levels:
            answers = await asyncio.gather(*(one(longest * (j + 1) // c) for j in range(c)))
            tokens += sum(n for n, _ in answers)
            refused += sum(1 for _, ok in answers if not ok)
        rates.append(tokens / max(time.perf_counter() - t0, 1e-9))
        if len(rates) >= 2 and _close(rates[-2], rates[-1]):
            break
    return WarmupSweeps(tuple(round(r, 1) for r in rates), refused)
