"""The score: successful tasks per hour with a bootstrap interval, and the latency figures.

tasks/hour = successes x 3600 / scored wall time. Its 95% interval resamples tasks (outcome and
duration together, seeded); it describes the spread inside one run (the task mix), never the
spread between runs. A resample's wall time is the measured wall time scaled by the makespan
of its tasks on the run's agents (`makespan`: several agents run at once, so the window is
the busiest agent's, not the sum of the task-seconds). Success rate has a Wilson interval;
TTFT, TPOT and ITL get p50/p90/p99; energy is divided per successful task and per output token
only when it was measured.

Comparisons between configs are in `tuner.metrics.paired` (the round is the unit there).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence

from tuner.records import Score, TaskRecord

__all__ = [
    "Score",
    "bootstrap_tasks_per_hour",
    "makespan",
    "percentile",
    "score_tasks",
    "wilson_interval",
]

Z95 = 1.959963984540054


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100), linear interpolation (numpy's default); None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a success rate (0, 0 interval bounds for no trials)."""
    if trials <= 0:
        return (0.0, 0.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def bootstrap_tasks_per_hour(
    outcomes: Sequence[bool],
    durations: Sequence[float],
    wall_s: float,
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    agents: int = 1,
) -> tuple[float, float]:
    """Percentile bootstrap interval of successes x 3600 / wall time, resampling tasks.

    This is the spread inside one run (which tasks, how long each took), not between runs.

    Args:
        outcomes: Success of each scored task.
        durations: Wall seconds of each task (same order).
        wall_s: The scored window's wall time.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the interval is reproducible).
        confidence: Coverage of the interval.
        agents: Agents that ran the tasks at once: a resample's window is the measured one
            scaled by its tasks' makespan on that many agents over the measured tasks'.

    Returns:
        (low, high) in tasks per hour; (0, 0) without tasks or time.
    """
    n = len(outcomes)
    if n == 0 or wall_s <= 0:
        return (0.0, 0.0)
    full = makespan(durations, agents)
    rng = random.Random(seed)
    indices = range(n)
    rates: list[float] = []
    for _ in range(resamples):
        picks = rng.choices(indices, k=n)
        wins = sum(1 for i in picks if outcomes[i])
        share = makespan([durations[i] for i in picks], agents) / full if full > 0 else 1.0
        rates.append(wins * 3600.0 / (wall_s * share) if share > 0 else 0.0)
    tail = (1 - confidence) / 2 * 100
    low, high = percentile(rates, tail), percentile(rates, 100 - tail)
    assert low is not None and high is not None
    return (low, high)


def makespan(durations: Sequence[float], agents: int = 1) -> float:
    """Seconds until `agents` agents, each taking the next task when free, finish the tasks
    in order (with one agent: their sum)."""
    if agents <= 1 or len(durations) <= 1:
        return float(sum(durations))
    free = [0.0] * min(agents, len(durations))
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def score_tasks(
    tasks: Sequence[TaskRecord],
    wall_s: float,
    *,
    itl_s: Sequence[float] = (),
    energy_joules: float | None = None,
    seed: int = 0,
    resamples: int = 2000,
    agents: int = 1,
) -> Score:
    """Score the scored tasks of a run.

    Args:
        tasks: Scored task records (warm-up tasks are left out by the caller).
        wall_s: Wall time of the scored window.
        itl_s: Gaps between streamed chunks of the scored steps.
        energy_joules: Energy over the window, None when not measured.
        seed: Seed of the bootstrap.
        resamples: Bootstrap resamples.
        agents: Agents that ran the tasks at once (the bootstrap's window scaling).
    """
    successes = sum(1 for t in tasks if t.success)
    rate = successes * 3600.0 / wall_s if wall_s > 0 else 0.0
    low, high = bootstrap_tasks_per_hour(
        [t.success for t in tasks], [t.wall_s for t in tasks], wall_s,
        resamples=resamples, seed=seed, agents=agents,
    )  # fmt: skip
    s_low, s_high = wilson_interval(successes, len(tasks))
    steps = [s for t in tasks for s in t.steps]
    ttfts = [s.ttft_s for s in steps if s.ttft_s is not None]
    tpots = [
        (s.latency_s - s.ttft_s) / (s.output_tokens - 1)
        for s in steps
        if s.ttft_s is not None and s.output_tokens > 1
    ]
    output_tokens = sum(s.output_tokens for s in steps)
    per_task = per_token = None
    if energy_joules is not None:
        per_task = energy_joules / successes if successes else None
        per_token = energy_joules / output_tokens if output_tokens else None
    return Score(
        tasks=len(tasks),
        successes=successes,
        scored_wall_s=wall_s,
        tasks_per_hour=rate,
        tasks_per_hour_low=low,
        tasks_per_hour_high=high,
        success_rate=successes / len(tasks) if tasks else 0.0,
        success_rate_low=s_low,
        success_rate_high=s_high,
        ttft_p50=percentile(ttfts, 50),
        ttft_p90=percentile(ttfts, 90),
        ttft_p99=percentile(ttfts, 99),
        tpot_p50=percentile(tpots, 50),
        tpot_p90=percentile(tpots, 90),
        tpot_p99=percentile(tpots, 99),
        itl_p50=percentile(itl_s, 50),
        itl_p90=percentile(itl_s, 90),
        itl_p99=percentile(itl_s, 99),
        output_tokens_per_s=output_tokens / wall_s if wall_s > 0 else None,
        energy_joules=energy_joules,
        joules_per_task=per_task,
        joules_per_token=per_token,
    )
