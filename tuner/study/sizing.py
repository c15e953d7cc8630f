"""Workload sizing: a GPU preset's scored window must be long enough to measure.

A GPU serves a small agent workload in seconds (the CPU preset's 12 tasks took 2.9 s on an H200,
docs/gpu-validation.md), and tasks/hour from a 3-second window is mostly noise. The rule, checked
at study start for GPU presets: at least `MIN_SCORED_S` seconds of scored time and at least
`min_tasks()` tasks, whichever needs more tasks.

Seconds are bounded from below without knowing the GPU: in a closed loop every agent waits for
its simulated tools after each tool call (lognormal with the preset's median, p99 = 12x the
median, docs/workload.md), so the window lasts at least the summed mean tool latency of the
scored tasks divided by the agents. The bound counts the tool calls of the real generated task
set (its oracle scripts), so it holds whatever the server's speed; decoding only adds to it.

CPU presets are exempt: the CPU build decodes a few dozen tokens/s, so decoding, not tools,
sets their window (an 8-12 task run lasts tens of seconds), and CI runs them many times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.errors import ConfigError
from tuner.workload.settings import WorkloadSettings
from tuner.workload.tasks import build_task_set

__all__ = [
    "MIN_SCORED_S",
    "Sizing",
    "check_sizing",
    "mean_tool_latency_s",
    "min_tasks",
    "size_workload",
]

MIN_SCORED_S = 60.0
# Four tasks per agent at least, and never fewer than 24: the bootstrap interval of tasks/h
# and the Wilson interval of the success rate need that many outcomes to be narrower than the
# differences the study looks for.
_MIN_TASKS = 24
_MIN_TASKS_PER_AGENT = 4
# The workload's tool latency: lognormal with p99 = 12x the median (tuner/workload/agent.py).
_LATENCY_SIGMA = math.log(12.0) / 2.3263478740408408


def mean_tool_latency_s(median_s: float) -> float:
    """Mean of the workload's lognormal tool latency with this median."""
    return median_s * math.exp(_LATENCY_SIGMA**2 / 2)


def min_tasks(agents: int) -> int:
    """Fewest scored tasks for `agents` closed-loop agents."""
    return max(_MIN_TASKS, _MIN_TASKS_PER_AGENT * agents)


@dataclass(frozen=True)
class Sizing:
    """What the scored window of a workload is at least."""

    tasks: int
    agents: int
    tool_calls: int
    floor_s: float  # summed mean tool latency / agents: the window lasts at least this long
    needed_tasks: int  # fewest tasks that meet both rules (>= tasks when it is met)

    @property
    def ok(self) -> bool:
        """Both rules hold."""
        return self.needed_tasks <= self.tasks

    def line(self) -> str:
        """One line for the user."""
        return (
            f"{self.tasks} scored tasks over {self.agents} agents wait at least "
            f"{self.floor_s:.0f} s for tools ({self.tool_calls} tool calls)"
        )


def _floor_s(settings: WorkloadSettings, calls: int) -> float:
    return calls * mean_tool_latency_s(settings.tool_latency_s) / settings.agents


def _calls_per_task(settings: WorkloadSettings, count: int) -> list[int]:
    # Task i depends on (seed, i) alone, so the first n of a longer set are the n-task set.
    bigger = settings.model_copy(update={"tasks": count})
    return [len(t.calls) for t in build_task_set(bigger)]


def size_workload(settings: WorkloadSettings) -> Sizing:
    """The scored window's lower bound for `settings`, and the fewest tasks both rules need."""
    calls = _calls_per_task(settings, settings.tasks)
    floor = _floor_s(settings, sum(calls))
    needed = max(settings.tasks, min_tasks(settings.agents))
    if floor < MIN_SCORED_S:
        if sum(calls) == 0 or settings.tool_latency_s <= 0:
            needed = max(needed, settings.tasks + 1)  # no task count can reach the floor
        else:
            # Tasks are alike on average: scale up (with room), then take the exact prefix.
            count = math.ceil(settings.tasks * MIN_SCORED_S / floor * 1.2) + 1
            while _floor_s(settings, sum(calls := _calls_per_task(settings, count))) < MIN_SCORED_S:
                count *= 2
            total = 0
            for n, c in enumerate(calls, start=1):
                total += c
                if _floor_s(settings, total) >= MIN_SCORED_S:
                    needed = max(needed, n)
                    break
    return Sizing(settings.tasks, settings.agents, sum(calls[: settings.tasks]), floor, needed)


def check_sizing(settings: WorkloadSettings, *, where: str) -> Sizing:
    """Refuse a GPU workload whose scored window is too short to measure.

    Args:
        settings: The workload the study would score every trial with.
        where: The preset it comes from, for the message.

    Raises:
        ConfigError: fewer tasks than `min_tasks`, or less than `MIN_SCORED_S` of tool waits.
    """
    if settings.traces is not None:
        # Recorded traces carry their own timing; the count is the only thing to check.
        if settings.tasks < min_tasks(settings.agents):
            raise ConfigError(
                f"{where}: {settings.tasks} scored traces is too few to measure; "
                f"use at least {min_tasks(settings.agents)} (--tasks)"
            )
        return Sizing(settings.tasks, settings.agents, 0, 0.0, settings.tasks)
    sizing = size_workload(settings)
    if sizing.ok:
        return sizing
    if settings.tool_latency_s <= 0:
        raise ConfigError(
            f"{where}: workload.tool_latency_s is 0, so nothing bounds the scored window on a "
            f"GPU (a few seconds); set a tool latency (0.25 s is realistic) and at least "
            f"{min_tasks(settings.agents)} tasks"
        )
    raise ConfigError(
        f"{where}: {sizing.line()}, under the {MIN_SCORED_S:.0f} s a GPU needs to measure "
        f"tasks/h; use at least {sizing.needed_tasks} tasks (--tasks {sizing.needed_tasks})"
    )
