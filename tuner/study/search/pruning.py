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

**Screening** (`ScreenRule`, multi-fidelity, off unless `PruneRule.screening` is set): a
candidate plays a short prefix of the workload first, the same task ids for every config
(the suite is played in order), and goes on only if it can still beat the best so far. At each
rung (a fraction of the scored tasks) its **optimistic** running rate is compared with the
running rate of the best completed trial at the same number of finished tasks (paired: the
same tasks). Optimistic: the Clopper-Pearson upper bound of its success share (97.5%, one
sided; 1 when every task succeeded, since a share cannot exceed 1) times its task rate, times
`1 + slack` for what the rest of the run can still change. A trial below it at a rung is
stopped (PRUNED: it costs what it ran and is never exported); one at or above it passes. Each
rung decided is a trial attribute (`rung`, `screened_out_at`). Successive halving keeps a
fixed share per rung; this keeps every candidate that could still win, so a study never loses
its answer to a quota. The rungs and slack were chosen on the recorded grid
(benchmarks/screening_rules.py and benchmarks/sample_efficiency.py --screening at 95daa70;
docs/decisions.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "PruneRule",
    "RunningRate",
    "ScreenRule",
    "ScreenVerdict",
    "binomial_upper",
    "poisson_upper",
]


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


def _binomial_cdf(k: int, n: int, p: float) -> float:
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    total = 0.0
    for i in range(k + 1):
        total += math.comb(n, i) * p**i * (1 - p) ** (n - i)
    return min(1.0, total)


def binomial_upper(k: int, n: int, tail: float = 0.025) -> float:
    """Clopper-Pearson one-sided upper bound on a success share after `k` of `n` succeeded.

    The `p` with P(X <= k | n, p) = tail (bisection); 1 when every one succeeded.
    """
    if n <= 0 or k >= n:
        return 1.0
    lo, hi = k / n, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if _binomial_cdf(k, n, mid) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class ScreenVerdict:
    """What one rung decided for a running candidate."""

    rung: int  # 1-based: the first rung is 1
    step: int  # tasks done when it was judged
    passed: bool
    optimistic: float  # the candidate's optimistic tasks/h at `step`
    reference: float | None  # the best completed trial's tasks/h at `step` (None: none yet)


@dataclass(frozen=True)
class ScreenRule:
    """Screening at rungs against the best completed trial (see the module docstring).

    Attributes:
        rungs: Fractions of the scored tasks at which a candidate is judged.
        slack: Relative room given to the candidate for the rest of its run.
        tail: One-sided tail of the bound on its success share.
    """

    rungs: tuple[float, ...] = (1 / 4, 1 / 2)
    slack: float = 0.20
    tail: float = 0.025

    def steps(self, total: int) -> tuple[int, ...]:
        """The task counts the rungs fall on for a workload of `total` scored tasks."""
        out = {max(1, math.ceil(f * total - 1e-9)) for f in self.rungs}
        return tuple(sorted(s for s in out if s < total))

    def judge(
        self, rate: RunningRate, previous_done: int, best_curve: dict[int, float] | None
    ) -> ScreenVerdict | None:
        """The verdict when this report crosses a rung (None when it crosses none).

        Args:
            rate: The candidate's progress now.
            previous_done: Tasks done at its previous report (rungs crossed since are judged
                once, at the highest).
            best_curve: The best completed trial's tasks/h by finished tasks; None when no
                trial has completed (the candidate then passes: nothing to lose against).
        """
        steps = self.steps(rate.tasks_total)
        crossed = [i for i, s in enumerate(steps) if previous_done < s <= rate.tasks_done]
        if not crossed:
            return None
        rung = crossed[-1] + 1
        optimistic = 0.0
        if rate.elapsed_s > 0 and rate.tasks_done > 0:
            share = binomial_upper(rate.successes, rate.tasks_done, self.tail)
            optimistic = share * rate.tasks_done * 3600.0 / rate.elapsed_s * (1 + self.slack)
        if not best_curve or rate.elapsed_s <= 0:
            return ScreenVerdict(rung, rate.tasks_done, True, optimistic, None)
        reference = baseline_at(best_curve, rate.tasks_done)
        return ScreenVerdict(rung, rate.tasks_done, optimistic >= reference, optimistic, reference)


@dataclass(frozen=True)
class PruneRule:
    """Stop a candidate only when its optimistic rate is below the baseline's at that point.

    Attributes:
        min_completed: Sampled trials (baseline included) that must have completed first.
        warmup_fraction: Share of the scored tasks that must be done before any check.
        tail: One-sided tail of the Poisson bound on the candidate's successes.
        screening: Screen candidates at rungs against the best completed trial as well
            (`ScreenRule`); None: off.
    """

    min_completed: int = 3
    warmup_fraction: float = 1 / 3
    tail: float = 0.025
    screening: ScreenRule | None = None

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
