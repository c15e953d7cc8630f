"""The sizings a study may scale its workload to, prepared before the study starts.

A preset's workload is written for one box; on a box several times slower its scored window
(and the whole study) grows as much. `sizing_plan` lists the sizes the first server's speed
probe may pick from (`tuner.workload.calibration.SizingPlan`), largest first:

1. the preset's workload;
2. its contexts at 3/4, then at 1/2 (the shared prefix, the tool outputs and the context
   bound scale together; the prefix never below 200 tokens, the bound never below the
   longest context of the tasks as generated, plus 10%: the policy text and the turns do not
   shrink, so on the CPU preset the bound stops at 2,304 of 3,072 tokens; a size equal to
   the one before it is left out);
3. at the smallest contexts, one task fewer at a time, down to
   `sizing.min_tasks(agents, cpu=...)`.

Contexts shrink before tasks do: fewer tasks widen every score's interval, while a half-size
context keeps the workload's shape (a shared prefix over several KV blocks, prompts that grow
each step, prefix reuse), and it shortens the warm-up's sweeps at the longest context. Each
option carries its uncached and cached prompt tokens and its output tokens
(`tuner.workload.describe.task_tokens` with the token estimate), so the worker only divides.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tuner.study.preflight.sizing import min_tasks
from tuner.workload.calibration import SizingOption, SizingPlan
from tuner.workload.describe import TaskTokens, describe_suite, task_tokens
from tuner.workload.settings import WorkloadSettings
from tuner.workload.shape import SuiteShape
from tuner.workload.tokens import TokenCounter

if TYPE_CHECKING:
    from tuner.study.space import Preset

__all__ = ["CONTEXT_SCALES", "scaled_shape", "sizing_plan"]

CONTEXT_SCALES = (1.0, 0.75, 0.5)
# The token estimate is within about 7% of a real tokenizer (tuner.workload.tasks), so a
# context bound keeps 10% over the estimated longest context.
_ESTIMATE_MARGIN = 0.9
# A smaller context is offered only when it saves at least this share of the uncached prefill
# of the last sizing kept. On the CPU preset the fixed policy and tool text (about 1.1k tokens)
# and short tool outputs leave little to scale: 1/2 of the contexts saved 3% of the prefill
# (9,474 -> 9,164 tokens for 12 tasks), a different workload for nothing, so the plan goes
# straight to fewer tasks there.
_MIN_SAVING = 0.10
# vLLM's CPU build caches whole 128-token blocks; GPU builds 16.
_CPU_BLOCK, _GPU_BLOCK = 128, 16


def scaled_shape(shape: SuiteShape, scale: float) -> SuiteShape:
    """`shape` with its contexts at `scale` (1.0: unchanged); turn lengths and steps kept."""
    if scale == 1.0:
        return shape
    prefix = max(200, round(shape.shared_prefix_tokens * scale))
    median = max(10, round(shape.tool_output_median_tokens * scale))
    p90 = max(median + 1, round(shape.tool_output_p90_tokens * scale))
    return shape.model_copy(
        update={
            "shared_prefix_tokens": prefix,
            "tool_output_median_tokens": median,
            "tool_output_p90_tokens": p90,
            "tool_output_max_tokens": max(p90, round(shape.tool_output_max_tokens * scale)),
            "max_context_tokens": max(
                512, math.ceil(prefix * 1.5), round(shape.max_context_tokens * scale)
            ),
        }
    )


def _round_up(value: float, step: int) -> int:
    return int(math.ceil(value / step) * step)


def _option(
    settings: WorkloadSettings, scale: float, tokens: list[TaskTokens], tasks: int
) -> SizingOption:
    head = tokens[:tasks]
    return SizingOption(
        settings=settings.model_copy(update={"tasks": tasks}),
        context_scale=scale,
        prefill_tokens=sum(t.prefill for t in head),
        decode_tokens=sum(t.output for t in head),
        cached_tokens=sum(t.cached for t in head),
    )


def sizing_plan(preset: Preset, window_s: float) -> SizingPlan:
    """The sizings of `preset`'s workload, largest first, for a `window_s` scored window."""
    w = preset.workload
    counter = TokenCounter.estimate()
    block = _CPU_BLOCK if preset.gpu.cpu else _GPU_BLOCK
    options: list[SizingOption] = []
    for scale in CONTEXT_SCALES:
        shape = scaled_shape(w.shape, scale)
        settings = w.model_copy(update={"shape": shape})
        # The bound must hold the tasks as generated (the shared policy text and the turns do
        # not shrink): at least their longest final context, with the estimate's margin.
        longest = describe_suite(settings, counter, block_size=block).final_context_tokens.max
        bound = min(w.shape.max_context_tokens, _round_up(longest / _ESTIMATE_MARGIN, 256))
        if shape.max_context_tokens < bound:
            shape = shape.model_copy(update={"max_context_tokens": bound})
            settings = w.model_copy(update={"shape": shape})
        if options and settings == options[-1].settings:
            continue
        # Task i depends on (seed, i) alone, so the first n of this set are the n-task set.
        candidate = task_tokens(settings, counter, block_size=block)
        option = _option(settings, scale, candidate, w.tasks)
        if options and option.prefill_tokens > (1 - _MIN_SAVING) * options[-1].prefill_tokens:
            continue  # scaling the contexts saves next to nothing here
        tokens = candidate
        options.append(option)
    floor = min(w.tasks, min_tasks(w.agents, cpu=preset.gpu.cpu))
    last = options[-1]
    options += [
        _option(last.settings, last.context_scale, tokens, n)
        for n in range(w.tasks - 1, floor - 1, -1)
    ]
    return SizingPlan(tuple(options), window_s)
