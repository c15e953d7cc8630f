"""Paired comparison of configs: the ROUND is the unit of evidence, and Holm over several.

A round is one fresh start of each compared config; its paired log ratio is the candidate's
tasks/h over the same round's baseline tasks/h, on the task ids both played (`RunOutcomes`).
`paired_ratio` gives a t-interval over the rounds' log ratios whose variance pools the rounds'
own spread with the preset's recorded run-to-run noise (`tuner.metrics.noise`; its degrees of
freedom weigh it). With one round the interval is the between-run term alone: one run cannot
show how much a whole run moves. A round far outside the others' spread (one slow start) is set
aside (`outlier_rounds`). `holm` corrects a set of one-sided tests for their number. The t
distribution is scipy's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tuner.metrics.noise import DEFAULT_NOISE, BetweenRunNoise, combine_noise
from tuner.metrics.scoring import makespan
from tuner.records import TaskRecord

__all__ = [
    "OUTLIER_FROM",
    "OUTLIER_SHARE",
    "OUTLIER_T",
    "PairedEstimate",
    "RunOutcomes",
    "holm",
    "outlier_rounds",
    "paired_ratio",
]


def _t() -> Any:
    """Student's t (`scipy.stats.t`), imported on first use: scipy.stats takes most of a second
    to import, which commands that never compare configs do not pay."""
    from scipy import stats

    return stats.t


@dataclass(frozen=True)
class RunOutcomes:
    """One scored run as the paired comparison needs it: task id -> (success, seconds)."""

    outcomes: tuple[tuple[str, bool, float], ...]  # (task_id, success, wall seconds)
    wall_s: float
    agents: int = 1  # agents that ran the tasks at once

    @classmethod
    def of(cls, tasks: Sequence[TaskRecord], wall_s: float, agents: int = 1) -> RunOutcomes:
        """From a run's scored task records (warm-up tasks are dropped here)."""
        kept = tuple((t.task_id, t.success, t.wall_s) for t in tasks if not t.warmup)
        return cls(kept, wall_s, agents)

    @property
    def tasks_per_hour(self) -> float:
        """Successes x 3600 / wall time."""
        wins = sum(1 for _, ok, _ in self.outcomes if ok)
        return wins * 3600.0 / self.wall_s if self.wall_s > 0 else 0.0

    def only(self, ids: set[str]) -> RunOutcomes:
        """The run restricted to task ids `ids`, its window scaled to their makespan's share."""
        kept = tuple(o for o in self.outcomes if o[0] in ids)
        if len(kept) == len(self.outcomes):
            return self
        full = makespan([o[2] for o in self.outcomes], self.agents)
        share = makespan([o[2] for o in kept], self.agents) / full if full > 0 else 1.0
        return RunOutcomes(kept, self.wall_s * share, self.agents)


@dataclass(frozen=True)
class PairedEstimate:
    """Candidate tasks/h over the baseline's, one paired ratio per round, with its interval.

    `ratio` is the geometric mean of the rounds' paired ratios; the interval is a t-interval
    on their log ratios whose variance pools the rounds' spread with the recorded between-run
    noise (`noise`); `p_value` is the one-sided p of "not faster" (ratio <= 1).
    """

    ratio: float
    low: float
    high: float
    rounds: int
    tasks: int
    p_value: float = 1.0
    df: int = 0
    noise: BetweenRunNoise = DEFAULT_NOISE
    round_ratios: tuple[float, ...] = ()
    level: float | None = None  # the one-sided level it was tested at, when sequential
    # Rounds (indices into `round_ratios`) left out of the estimate as outliers against the
    # others' spread (`outlier_rounds`): a slow start. `rounds` still counts them.
    set_aside: tuple[int, ...] = ()

    @property
    def used(self) -> int:
        """The rounds the estimate and interval stand on (`rounds` less the set-aside)."""
        return self.rounds - len(self.set_aside)

    @property
    def beats(self) -> bool:
        """The whole interval is above 1 (one test alone; a study corrects for several)."""
        return self.low > 1.0

    @property
    def loses(self) -> bool:
        """The whole interval is below 1."""
        return self.high < 1.0

    def upper(self, level: float) -> float:
        """The one-sided upper confidence bound of the ratio at `level` (e.g. 0.05: the ratio
        is below it with 95% confidence), from the same t distribution as the interval."""
        if self.used < 1 or self.df < 1:
            return math.inf
        se = self.noise.log_sd / math.sqrt(self.used)
        return math.exp(math.log(self.ratio) + float(_t().ppf(1 - level, self.df)) * se)

    def describe(self) -> str:
        """e.g. "x1.12 [1.05, 1.19] over 3 rounds of 12 tasks (...between-run...)"."""
        rounds = f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
        interval = f"[{self.low:.3f}, {self.high:.3f}]"
        sd = self.noise.describe()
        if self.rounds == 1:
            how = f"one round, so the interval is the between-run term: {sd}"
        else:
            how = f"interval over the rounds, with the between-run term: {sd}"
        level = f", tested at one-sided {self.level:.2g}" if self.level is not None else ""
        aside = ""
        if self.set_aside:
            shown = ", ".join(
                f"round {i + 1} (x{self.round_ratios[i]:.3f})" for i in self.set_aside
            )
            aside = (
                f" ({shown} set aside: more than {OUTLIER_T:g} predictive sds from the other "
                "rounds, a slow start)"
            )
        return (
            f"x{self.ratio:.3f} {interval} over {rounds} of {self.tasks} tasks{aside}{level}; {how}"
        )


# A round's log ratio is set aside when it lies more than OUTLIER_T sds of the prediction
# from the other rounds (their mean; the prior updated by their spread, times
# sqrt(1 + 1/n)), from OUTLIER_FROM rounds on and at most one round in OUTLIER_SHARE.
# Why: one slow start (a start at x0.75, which shared boxes have) moved a round by 0.29 in
# log ratio; left in, it widened the interval of every later look and cost a true +10% a
# quarter of its power (benchmarks/decision_sim.py, docs/decision-sim.md).
OUTLIER_T: Final = 3.5
OUTLIER_FROM: Final = 4
OUTLIER_SHARE: Final = 5


def outlier_rounds(logs: Sequence[float], noise: BetweenRunNoise) -> tuple[int, ...]:
    """Rounds to leave out of a paired estimate: one at a time, the round furthest from the
    others (in sds of the prediction from the others, with `noise` as the prior updated by
    their spread) while it is more than `OUTLIER_T` away, from `OUTLIER_FROM` rounds on, at
    most one in `OUTLIER_SHARE` rounds. Symmetric: a round too high is set aside as a round
    too low is (a slow baseline start reads as a fast candidate)."""
    r = len(logs)
    if r < OUTLIER_FROM:
        return ()
    kept = list(range(r))
    out: list[int] = []
    for _ in range(r // OUTLIER_SHARE):
        worst: tuple[float, int] | None = None
        for j in kept:
            others = [logs[i] for i in kept if i != j]
            n = len(others)
            mean = sum(others) / n
            squares = sum((x - mean) ** 2 for x in others)
            sd = math.sqrt((noise.df * noise.log_sd**2 + squares) / (noise.df + n - 1))
            z = abs(logs[j] - mean) / (sd * math.sqrt(1 + 1 / n))
            if worst is None or z > worst[0]:
                worst = (z, j)
        if worst is None or worst[0] <= OUTLIER_T:
            break
        kept.remove(worst[1])
        out.append(worst[1])
    return tuple(sorted(out))


def paired_ratio(
    candidate: Sequence[RunOutcomes],
    baseline: Sequence[RunOutcomes],
    *,
    noise: BetweenRunNoise = DEFAULT_NOISE,
    confidence: float = 0.95,
) -> PairedEstimate | None:
    """Per-round paired ratios of tasks/h and a t-interval over the rounds.

    Run i of the candidate is paired with run i of the baseline (the same round); within a
    round both sides are restricted to the task ids every run played, so the task mix cancels.
    Each round gives log(candidate tasks/h / baseline tasks/h). With R rounds and the prior
    noise (sd s0 over d0 degrees of freedom: the recorded repeats, possibly already updated by
    the study's baseline starts), the variance of one round's log ratio is
    (d0 s0^2 + sum of squared deviations) / (d0 + R - 1) (`combine_noise`, a conjugate update):
    the prior weighs as d0 earlier rounds, so two rounds that happen to agree do not make a
    narrow interval, and rounds that disagree widen it by their weight. The interval is
    mean +- t(d0 + R - 1) x sd / sqrt(R). From `OUTLIER_FROM` rounds on, a round far outside
    the others' spread (`outlier_rounds`: one slow start) is left out of the mean (R counts
    the rounds kept) and counts in the spread as a round at the edge, OUTLIER_T predictive
    sds out.

    Args:
        candidate: The candidate's runs, one per round.
        baseline: The baseline's runs, same rounds, same order.
        noise: The prior between-run noise of a round's log ratio.
        confidence: Coverage of the (two-sided) interval.

    Returns:
        The estimate, or None when there is nothing to pair (no rounds, no common task, or a
        side that completed nothing in some round).
    """
    pairs = list(zip(candidate, baseline, strict=False))
    if not pairs:
        return None
    common = set.intersection(
        *({tid for tid, _, _ in run.outcomes} for pair in pairs for run in pair)
    )
    if not common:
        return None
    logs: list[float] = []
    for c, b in pairs:
        c_rate, b_rate = c.only(common).tasks_per_hour, b.only(common).tasks_per_hour
        if c_rate <= 0 or b_rate <= 0:
            return None
        logs.append(math.log(c_rate / b_rate))
    rounds = len(logs)
    aside = outlier_rounds(logs, noise)
    used = [x for i, x in enumerate(logs) if i not in aside]
    r = len(used)
    mean = sum(used) / r
    squares = sum((x - mean) ** 2 for x in used)
    if aside:
        # A set-aside round leaves the mean but not the spread: it counts as a round at the
        # edge (OUTLIER_T predictive sds out), so setting aside never narrows the interval
        # below what an ordinary extreme round gives (with the round simply dropped, false
        # wins rose to 7.7% at x6 of the fitted noise: docs/decision-sim.md).
        kept = combine_noise(noise, squares, r - 1, "")
        edge = OUTLIER_T * kept.log_sd * math.sqrt(1 + 1 / r)
        squares += len(aside) * edge**2
    what = f"this study's {rounds} rounds" + (f" ({len(aside)} set aside)" if aside else "")
    noise = combine_noise(noise, squares, rounds - 1, what)
    df, sd = noise.df, noise.log_sd
    se = sd / math.sqrt(r)
    t = float(_t().ppf(1 - (1 - confidence) / 2, df))
    p = float(_t().sf(mean / se, df)) if se > 0 else (0.0 if mean > 0 else 1.0)
    return PairedEstimate(
        ratio=math.exp(mean),
        low=math.exp(mean - t * se),
        high=math.exp(mean + t * se),
        rounds=rounds,
        tasks=len(common),
        p_value=p,
        df=df,
        noise=noise,
        round_ratios=tuple(math.exp(x) for x in logs),
        set_aside=aside,
    )


def holm(p_values: Mapping[int, float], alpha: float = 0.025) -> set[int]:
    """Keys whose one-sided test is rejected by Holm's step-down at family-wise `alpha`.

    The i-th smallest of m p-values must be at most alpha / (m - i); the first that is not
    stops the procedure.
    """
    ordered = sorted(p_values.items(), key=lambda kv: (kv[1], kv[0]))
    m = len(ordered)
    rejected: set[int] = set()
    for i, (key, p) in enumerate(ordered):
        if p > alpha / (m - i):
            break
        rejected.add(key)
    return rejected
