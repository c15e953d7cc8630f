"""The score: successful tasks per hour with a bootstrap interval, and the latency figures.

tasks/hour = successes x 3600 / scored wall time. Its 95% interval resamples tasks (outcome and
duration together, seeded): a resample's wall time is the measured wall time scaled by its
share of the task-seconds, so slow tasks drawn twice lengthen the window as they would have.
Success rate has a Wilson interval; TTFT, TPOT and ITL get p50/p90/p99; energy is divided per
successful task and per output token only when it was measured.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.records import TaskRecord

__all__ = [
    "Score",
    "bootstrap_tasks_per_hour",
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
) -> tuple[float, float]:
    """Percentile bootstrap interval of successes x 3600 / wall time, resampling tasks.

    Args:
        outcomes: Success of each scored task.
        durations: Wall seconds of each task (same order).
        wall_s: The scored window's wall time.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling (the interval is reproducible).
        confidence: Coverage of the interval.

    Returns:
        (low, high) in tasks per hour; (0, 0) without tasks or time.
    """
    n = len(outcomes)
    total = sum(durations)
    if n == 0 or wall_s <= 0:
        return (0.0, 0.0)
    rng = random.Random(seed)
    indices = range(n)
    rates: list[float] = []
    for _ in range(resamples):
        picks = rng.choices(indices, k=n)
        wins = sum(1 for i in picks if outcomes[i])
        share = sum(durations[i] for i in picks) / total if total > 0 else 1.0
        rates.append(wins * 3600.0 / (wall_s * share) if share > 0 else 0.0)
    tail = (1 - confidence) / 2 * 100
    low, high = percentile(rates, tail), percentile(rates, 100 - tail)
    assert low is not None and high is not None
    return (low, high)


@dataclass(frozen=True)
class Score:
    """What the scoring computes from the scored tasks of one run."""

    tasks: int
    successes: int
    scored_wall_s: float
    tasks_per_hour: float
    tasks_per_hour_low: float
    tasks_per_hour_high: float
    success_rate: float
    success_rate_low: float
    success_rate_high: float
    ttft_p50: float | None
    ttft_p90: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p90: float | None
    tpot_p99: float | None
    itl_p50: float | None
    itl_p90: float | None
    itl_p99: float | None
    output_tokens_per_s: float | None
    energy_joules: float | None
    joules_per_task: float | None
    joules_per_token: float | None


def score_tasks(
    tasks: Sequence[TaskRecord],
    wall_s: float,
    *,
    itl_s: Sequence[float] = (),
    energy_joules: float | None = None,
    seed: int = 0,
    resamples: int = 2000,
) -> Score:
    """Score the scored tasks of a run.

    Args:
        tasks: Scored task records (warm-up tasks are left out by the caller).
        wall_s: Wall time of the scored window.
        itl_s: Gaps between streamed chunks of the scored steps.
        energy_joules: Energy over the window, None when not measured.
        seed: Seed of the bootstrap.
        resamples: Bootstrap resamples.
    """
    successes = sum(1 for t in tasks if t.success)
    rate = successes * 3600.0 / wall_s if wall_s > 0 else 0.0
    low, high = bootstrap_tasks_per_hour(
        [t.success for t in tasks], [t.wall_s for t in tasks], wall_s,
        resamples=resamples, seed=seed,
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
