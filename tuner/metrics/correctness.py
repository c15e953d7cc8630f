"""Correctness: did a config change the answers? Greedy probe outputs and live success rates.

With greedy decoding speculation is meant to be lossless, but two starts of the same baseline
server already differ a little (batching, kernels). `judge_outputs` measures a candidate's token
match with the baseline against that floor and flags it only when it is clearly below;
`two_proportion_drop` tests a live success rate against the baseline's.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.metrics.scoring import percentile

__all__ = ["MIN_GAP", "OutputCheck", "judge_outputs", "match_rates", "two_proportion_drop"]


def two_proportion_drop(
    successes: int, tasks: int, base_successes: int, base_tasks: int, *, alpha: float = 0.05
) -> float | None:
    """One-sided p-value that a success rate is below the baseline's (two-proportion z-test).

    Returns None when either side has no tasks or both rates are 0 or 1 (nothing to test).
    The caller flags a drop when the value is below `alpha`.
    """
    del alpha  # the threshold belongs to the caller; kept in the signature to document it
    if tasks <= 0 or base_tasks <= 0:
        return None
    p1, p2 = successes / tasks, base_successes / base_tasks
    pooled = (successes + base_successes) / (tasks + base_tasks)
    var = pooled * (1 - pooled) * (1 / tasks + 1 / base_tasks)
    if var <= 0:
        return None
    z = (p1 - p2) / math.sqrt(var)
    return 0.5 * math.erfc(-z / math.sqrt(2))  # P(Z <= z)


Tokens = Sequence[int | str]


def match_rates(reference: Sequence[Tokens], other: Sequence[Tokens]) -> list[float]:
    """Per prompt, the share of tokens equal from the start until the first difference.

    Greedy decoding makes every token after a first difference differ too, so the common
    prefix over the longer answer is the measure; two empty answers match fully.
    """
    rates = []
    for a, b in zip(reference, other, strict=False):
        longest = max(len(a), len(b))
        same = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            same += 1
        rates.append(same / longest if longest else 1.0)
    return rates


@dataclass(frozen=True)
class OutputCheck:
    """A candidate's greedy answers against the baseline's, and the baseline-vs-baseline floor."""

    match: float  # mean match rate, candidate vs baseline
    floor: float | None  # mean match rate, second baseline start vs first; None: not measured
    gap_high: float | None  # upper bound of mean(candidate - floor) per prompt
    changes_outputs: bool
    prompts: int

    def describe(self) -> str:
        """e.g. "token match 0.62 vs floor 0.98: changes outputs"."""
        if self.floor is None:
            return f"token match {self.match:.2f} (no second baseline start: no floor)"
        verdict = "changes outputs" if self.changes_outputs else "within the floor"
        return f"token match {self.match:.2f} vs floor {self.floor:.2f}: {verdict}"


# "Clearly below the floor": the paired upper bound is below 0 and the mean gap is at least
# this much, so a one-token wobble on one prompt is not called a changed output.
MIN_GAP = 0.05


def judge_outputs(
    baseline: Sequence[Tokens],
    candidate: Sequence[Tokens],
    *more_baselines: Sequence[Tokens],
    resamples: int = 2000,
    seed: int = 0,
) -> OutputCheck:
    """Is the candidate's match with the baseline clearly below the floor of baseline restarts?

    Args:
        baseline: The baseline's answers (the reference).
        candidate: The candidate's answers, same prompts.
        *more_baselines: Answers of later starts of the baseline server; each prompt's floor is
            their mean match with the reference. Without any there is no floor and nothing is
            flagged.
        resamples: Bootstrap resamples over the prompts.
        seed: Seed of the resampling.
    """
    cand = match_rates(baseline, candidate)
    match = sum(cand) / len(cand) if cand else 1.0
    if not more_baselines or not cand:
        return OutputCheck(match, None, None, False, len(cand))
    per_start = [match_rates(baseline, other) for other in more_baselines]
    floor_rates = [sum(rates) / len(rates) for rates in zip(*per_start, strict=True)]
    diffs = [c - f for c, f in zip(cand, floor_rates, strict=False)]
    floor = sum(floor_rates) / len(floor_rates)
    rng = random.Random(seed)
    means = [sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(resamples)]
    high = percentile(means, 97.5)
    assert high is not None
    mean_gap = sum(diffs) / len(diffs)
    flagged = high < 0 and -mean_gap >= MIN_GAP
    return OutputCheck(match, floor, high, flagged, len(cand))
