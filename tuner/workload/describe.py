"""Shape statistics of a task set, in tokens of a real tokenizer (or the estimate, flagged).

`describe_suite` renders every task exactly as the replay runner sends it and measures the
shared prefix, steps per task, tool outputs, assistant turns, prompt growth per step, final
context and the ideal prefix-cache hit ratio, so anyone can check the suite against the
realistic shape in docs/workload.md.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass

from tuner.metrics.scoring import percentile
from tuner.workload.replay import ReplayScript, script_for_task
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import build_task_set
from tuner.workload.tokens import TokenCounter

__all__ = ["Spread", "SuiteStats", "TaskTokens", "describe_suite", "task_tokens"]


@dataclass(frozen=True)
class Spread:
    """min, median, p90, p95, p99 and max of a list of counts."""

    count: int
    min: float
    median: float
    p90: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Spread:
        """The spread of `values` (all zeros when empty)."""
        if not values:
            return cls(0, 0, 0, 0, 0, 0, 0)
        return cls(
            len(values),
            min(values),
            statistics.median(values),
            percentile(values, 90) or 0.0,
            percentile(values, 95) or 0.0,
            percentile(values, 99) or 0.0,
            max(values),
        )


@dataclass(frozen=True)
class SuiteStats:
    """What `tuner workload describe` prints."""

    tokenizer: str
    estimated: bool
    tasks: int
    shared_prefix_tokens: int
    steps: Spread
    tool_output_tokens: Spread
    call_turn_tokens: Spread
    long_turn_tokens: Spread
    prompt_growth_tokens: Spread
    final_context_tokens: Spread
    ideal_cache_hit_ratio: float
    ideal_replay_hit_ratio: float
    block_size: int


def _message_tokens(counter: TokenCounter, message: dict[str, object]) -> int:
    content = message.get("content")
    text = content if isinstance(content, str) else json.dumps(content) if content else ""
    calls = message.get("tool_calls")
    if calls:
        text += json.dumps(calls)
    return counter.count(text) + counter.message_overhead


@dataclass
class _Measured:
    prompts: list[int]
    replied: list[int]  # each prompt plus the assistant turn written after it
    outputs: list[int]
    calls: list[int]
    longs: list[int]
    growths: list[int]
    final: int


def _script_stats(
    counter: TokenCounter, script: ReplayScript, prefix: int, long_from: int
) -> _Measured:
    """Per-step prompts, tool outputs, call turns, long turns, growths and final context."""
    prompt = prefix + sum(_message_tokens(counter, m) for m in script.head[1:])
    prompts: list[int] = []
    replied: list[int] = []
    outputs: list[int] = []
    calls: list[int] = []
    longs: list[int] = []
    for turn in script.turns:
        prompts.append(prompt)
        size = counter.count(turn.text)
        (longs if size >= long_from else calls).append(size)
        prompt += _message_tokens(counter, turn.assistant)
        replied.append(prompt)
        for message in turn.followups:
            size = _message_tokens(counter, message)
            outputs.append(size - counter.message_overhead)
            prompt += size
    growths = [b - a for a, b in itertools.pairwise(prompts)]
    return _Measured(prompts, replied, outputs, calls, longs, growths, prompt)


@dataclass(frozen=True)
class TaskTokens:
    """What one replayed task asks of the server, in tokens (the sizing's cost model).

    Attributes:
        prompt: Prompt tokens summed over its steps.
        cached: Of those, what an ideal prefix cache serves in replay (whole blocks of the
            shared prefix at the first step, of the previous prompt at later ones).
        output: Assistant tokens it forces the server to write.
    """

    prompt: int
    cached: int
    output: int

    @property
    def prefill(self) -> int:
        """Prompt tokens the server must compute."""
        return self.prompt - self.cached


def task_tokens(
    settings: WorkloadSettings, counter: TokenCounter, *, block_size: int = 16
) -> list[TaskTokens]:
    """Per scored task of `settings`: prompt, ideally cached and output tokens in replay.

    Uses the same rendering and reuse rule as `describe_suite` (replay: the scripted reply
    differs from the forced one, so a step reuses the previous prompt, not its reply).
    """
    scripts = [script_for_task(t, settings) for t in build_task_set(settings)]
    system = scripts[0].head[0]
    prefix = _message_tokens(counter, system)
    if scripts[0].tools:
        prefix += counter.count(json.dumps(list(scripts[0].tools)))
    out: list[TaskTokens] = []
    for script in scripts:
        m = _script_stats(counter, script, prefix, long_from=0)
        first = (prefix // block_size) * block_size
        cached = first + sum((p // block_size) * block_size for p in m.prompts[:-1])
        written = sum(m.calls) + sum(m.longs)
        out.append(TaskTokens(sum(m.prompts), min(cached, sum(m.prompts)), written))
    return out


def describe_suite(
    settings: WorkloadSettings, counter: TokenCounter, *, block_size: int = 16
) -> SuiteStats:
    """Measure the scored task set of `settings` with `counter`.

    Args:
        settings: The workload (its shape, seed, task count and tool protocol).
        counter: A real tokenizer's counter, or `TokenCounter.estimate()`.
        block_size: KV block size for the ideal cache hit ratio (16 on GPU, 128 on CPU).

    Returns:
        The statistics; with the "tools" protocol the prefix counts the tool schemas as JSON
        (the model's chat template may render them differently).
    """
    scripts = [script_for_task(t, settings) for t in build_task_set(settings)]
    system = scripts[0].head[0]
    prefix = _message_tokens(counter, system)
    if scripts[0].tools:
        prefix += counter.count(json.dumps(list(scripts[0].tools)))
    long_from = (settings.shape.call_turn_max_tokens + settings.shape.plan_turn_min_tokens) // 2
    steps: list[float] = []
    outputs: list[float] = []
    calls: list[float] = []
    longs: list[float] = []
    growths: list[float] = []
    finals: list[float] = []
    live = replay = total = 0
    for script in scripts:
        m = _script_stats(counter, script, prefix, long_from)
        steps.append(len(script.turns))
        outputs += m.outputs
        calls += m.calls
        longs += m.longs
        growths += m.growths
        finals.append(m.final)
        total += sum(m.prompts)
        # Ideal reuse, up to the last full block: the shared prefix for a task's first step;
        # for every later one the previous prompt and reply (live: the model wrote the reply)
        # or the previous prompt alone (replay: the scripted reply differs from the forced one).
        first = (prefix // block_size) * block_size
        live += first + sum((p // block_size) * block_size for p in m.replied[:-1])
        replay += first + sum((p // block_size) * block_size for p in m.prompts[:-1])
    return SuiteStats(
        tokenizer=counter.name,
        estimated=counter.estimated,
        tasks=len(scripts),
        shared_prefix_tokens=prefix,
        steps=Spread.of(steps),
        tool_output_tokens=Spread.of(outputs),
        call_turn_tokens=Spread.of(calls),
        long_turn_tokens=Spread.of(longs),
        prompt_growth_tokens=Spread.of(growths),
        final_context_tokens=Spread.of(finals),
        ideal_cache_hit_ratio=live / total if total else 0.0,
        ideal_replay_hit_ratio=replay / total if total else 0.0,
        block_size=block_size,
    )
