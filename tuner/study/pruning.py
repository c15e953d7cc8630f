"""When to stop a candidate early: only when even its optimistic rate loses to the baseline.

The rule (`PruneRule.should_prune`), checked each time a running candidate finishes a task:

1. Never before the baseline has finished with a score, and never before `min_completed`
   (3) sampled trials have completed: until then there is nothing reliable to lose against.
2. Never before `warmup_fraction` (a third) of the scored tasks are done: the first tasks of a
   closed-loop run finish while the agents ramp up, and their rate says little.
3. Then prune when the **upper bound** of the candidate's running rate is below the
   **baseline's running rate at the same number of finished tasks**. The bound treats the
   successes so far as a Poisson count (exact one-sided 97.5% bound), which is wider than the
   real spread of a closed loop of tasks: the rule errs towards letting a trial finish.

Why this rule: a pruned trial is never exported, so pruning a config that would have won
loses the answer, while running a loser to the end costs one trial's time. Comparing with the
baseline (always measured first) rather than a percentile of earlier candidates means a
candidate a few percent under the baseline is never stopped: with 12 tasks the bound is 2.6x
the observed rate after 4 tasks and 1.8x after 11, so only clearly losing configs (under about
40% of the baseline's rate early, 55% late) are stopped. The sample-efficiency benchmark
(benchmarks/sample_efficiency.py) measures how much time this saves and what it risks.

Controls, confirmations and the baseline itself are never pruned (the driver asks this rule
for candidates only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PruneRule", "RunningRate", "poisson_upper"]


@dataclass(frozen=True)
class RunningRate:
    """A running trial's scored progress: what the pruner judges."""

    tasks_done: int
    tasks_total: int
    successes: int
    elapsed_s: float


def _poisson_cdf(k: int, lam: float) -> float:
    term = total = math.exp(-lam)
    for i in range(1, k + 1):
        term *= lam / i
        total += term
    return total


def poisson_upper(k: int, tail: float = 0.025) -> float:
    """Exact one-sided upper bound on a Poisson mean after observing `k` events.

    The `lam` with P(X <= k | lam) = tail, found by bisection (no SciPy needed).
    """
    lo, hi = float(k), float(k) + 10.0 * math.sqrt(k + 1) + 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        if _poisson_cdf(k, mid) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class PruneRule:
    """Stop a candidate only when its optimistic rate is below the baseline's at that point.

    Attributes:
        min_completed: Sampled trials (baseline included) that must have completed first.
        warmup_fraction: Share of the scored tasks that must be done before any check.
        tail: One-sided tail of the Poisson bound on the candidate's successes.
    """

    min_completed: int = 3
    warmup_fraction: float = 1 / 3
    tail: float = 0.025

    def should_prune(
        self, rate: RunningRate, baseline_curve: dict[int, float] | None, completed: int
    ) -> bool:
        """True when the candidate is clearly losing to the baseline.

        Args:
            rate: The candidate's progress so far.
            baseline_curve: The baseline's tasks/h by finished tasks (its intermediate
                values); None while the baseline has no score.
            completed: Sampled trials completed in the study so far.
        """
        if not baseline_curve or completed < self.min_completed:
            return False
        if rate.tasks_done < max(1, math.ceil(self.warmup_fraction * rate.tasks_total)):
            return False
        if rate.elapsed_s <= 0 or rate.tasks_done >= rate.tasks_total:
            return False
        upper = poisson_upper(rate.successes, self.tail) * 3600.0 / rate.elapsed_s
        return upper < baseline_at(baseline_curve, rate.tasks_done)


def baseline_at(curve: dict[int, float], step: int) -> float:
    """The baseline's running rate after `step` tasks (its nearest earlier report)."""
    earlier = [s for s in curve if s <= step]
    return curve[max(earlier)] if earlier else curve[min(curve)]
