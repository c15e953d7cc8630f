"""The score: successful tasks per hour with a bootstrap interval, and the latency figures.

tasks/hour = successes x 3600 / scored wall time. Its 95% interval resamples tasks (outcome and
duration together, seeded): a resample's wall time is the measured wall time scaled by its
share of the task-seconds, so slow tasks drawn twice lengthen the window as they would have.
Success rate has a Wilson interval; TTFT, TPOT and ITL get p50/p90/p99; energy is divided per
successful task and per output token only when it was measured.

Comparisons between configs are paired (`paired_ratio`): every trial plays the same task ids,
and confirmation runs come in rounds (baseline, candidates, again), so the bootstrap draws
rounds and task ids once and applies them to both sides. One run's interval measures the task
mix, which every config shares; the paired one cancels it and, with repeats, carries the
run-to-run noise. `two_proportion_drop` tests a live success rate against the baseline's, and
`judge_outputs` compares greedy probe answers against the floor two baseline starts give.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.records import TaskRecord

__all__ = [
    "PairedEstimate",
    "RunOutcomes",
    "Score",
    "bootstrap_tasks_per_hour",
    "paired_ratio",
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
    """What the scoring computes from the scored tasks of one run (None: not measured)."""

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


@dataclass(frozen=True)
class RunOutcomes:
    """One scored run as the paired comparison needs it: task id -> (success, seconds)."""

    outcomes: tuple[tuple[str, bool, float], ...]  # (task_id, success, wall seconds)
    wall_s: float

    @classmethod
    def of(cls, tasks: Sequence[TaskRecord], wall_s: float) -> RunOutcomes:
        """From a run's scored task records (warm-up tasks are dropped here)."""
        kept = tuple((t.task_id, t.success, t.wall_s) for t in tasks if not t.warmup)
        return cls(kept, wall_s)

    @property
    def tasks_per_hour(self) -> float:
        """Successes x 3600 / wall time."""
        wins = sum(1 for _, ok, _ in self.outcomes if ok)
        return wins * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    def _rate(self, picks: Sequence[str]) -> float:
        # A resample's wall time is the run's, scaled by its share of the task-seconds (as in
        # `bootstrap_tasks_per_hour`): slow tasks drawn twice lengthen the window.
        table = {tid: (ok, secs) for tid, ok, secs in self.outcomes}
        total = sum(secs for _, _, secs in self.outcomes)
        wins = sum(1 for tid in picks if table[tid][0])
        share = sum(table[tid][1] for tid in picks) / total if total > 0 else 1.0
        return wins * 3600.0 / (self.wall_s * share) if share > 0 and self.wall_s > 0 else 0.0


@dataclass(frozen=True)
class PairedEstimate:
    """Candidate tasks/h over the baseline's, paired by round and task, with its interval."""

    ratio: float
    low: float
    high: float
    rounds: int
    tasks: int

    @property
    def beats(self) -> bool:
        """The whole interval is above 1: the candidate is faster beyond the noise."""
        return self.low > 1.0

    @property
    def loses(self) -> bool:
        """The whole interval is below 1."""
        return self.high < 1.0

    def describe(self) -> str:
        """e.g. "x1.12 [1.05, 1.19] over 3 rounds of 12 tasks"."""
        rounds = f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
        interval = f"[{self.low:.3f}, {self.high:.3f}]"
        return f"x{self.ratio:.3f} {interval} over {rounds} of {self.tasks} tasks"


def paired_ratio(
    candidate: Sequence[RunOutcomes],
    baseline: Sequence[RunOutcomes],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedEstimate | None:
    """Paired bootstrap of (mean candidate tasks/h) / (mean baseline tasks/h).

    Run i of the candidate is paired with run i of the baseline (same round); within a round,
    tasks are paired by id. Each resample draws rounds (when there are several) and task ids
    with replacement and applies the same draw to both sides, so what every config shares
    (the task mix, a slow moment of the machine within a round) cancels.

    Args:
        candidate: The candidate's runs, one per round.
        baseline: The baseline's runs, same rounds, same order.
        resamples: Bootstrap resamples.
        seed: Seed of the resampling.
        confidence: Coverage of the interval.

    Returns:
        The estimate, or None when there is nothing to pair (no rounds, no common task, or a
        baseline that completed nothing).
    """
    pairs = list(zip(candidate, baseline, strict=False))
    if not pairs:
        return None
    common = set.intersection(
        *({tid for tid, _, _ in run.outcomes} for pair in pairs for run in pair)
    )
    ids = sorted(common)
    if not ids:
        return None
    pairs = [(_only(c, common), _only(b, common)) for c, b in pairs]
    base_mean = sum(b.tasks_per_hour for _, b in pairs)
    if base_mean <= 0:
        return None
    point = sum(c.tasks_per_hour for c, _ in pairs) / base_mean
    rng = random.Random(seed)
    ratios: list[float] = []
    for _ in range(resamples):
        rounds = rng.choices(pairs, k=len(pairs)) if len(pairs) > 1 else pairs
        picks = rng.choices(ids, k=len(ids))
        den = sum(b._rate(picks) for _, b in rounds)
        if den > 0:
            ratios.append(sum(c._rate(picks) for c, _ in rounds) / den)
    tail = (1 - confidence) / 2 * 100
    low, high = percentile(ratios, tail), percentile(ratios, 100 - tail)
    if low is None or high is None:
        return None
    return PairedEstimate(point, low, high, len(pairs), len(ids))


def _only(run: RunOutcomes, ids: set[str]) -> RunOutcomes:
    kept = tuple(o for o in run.outcomes if o[0] in ids)
    if len(kept) == len(run.outcomes):
        return run
    # Scale the window to the kept tasks' share of the task-seconds.
    total = sum(o[2] for o in run.outcomes)
    share = sum(o[2] for o in kept) / total if total > 0 else 1.0
    return RunOutcomes(kept, run.wall_s * share)
