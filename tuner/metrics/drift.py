"""Drift across rounds: is a config's score rising or falling from one fresh start to the next?

Rounds of one config (each a fresh server start) are only exchangeable when nothing warms or
cools between them. On a machine whose caches fill as servers meet new shapes, or whose other
load comes and goes, the first round measures the machine as much as the config, and an
interleaved A B A B design does not cancel a trend that affects configs unequally. So a trend
is detected and reported, never averaged away:

- `detect_trend`: a monotone run over the rounds (Mann-Kendall's S at its extreme for 3 or 4
  rounds; its normal approximation, p < `ALPHA`, from 5 rounds on) whose size, the Theil-Sen
  slope over the whole span relative to the median, is at least `MIN_CHANGE` (5%);
- `first_round_gap`: round 1 against the mean of the later rounds, relative.

Drift during the search is measured and corrected, not just reported: the baseline starts again
every few trials (`tuner.study.search.roles.rerun_due`), and a search-time trial is compared
with the baseline's rate at its own place in the study's run order (`baseline_at`: log-linear
interpolation between the baseline starts that bracket it; after the last one, that latest
start). The same starts, with a straight line in run order fitted through their log tasks/h, are
the study's own repeats of the between-run noise (`drift_corrected_noise`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tuner.metrics.noise import BetweenRunNoise, combine_noise

__all__ = [
    "ALPHA",
    "MIN_CHANGE",
    "BaselineAt",
    "Trend",
    "baseline_at",
    "detect_trend",
    "drift_corrected_noise",
    "first_round_gap",
]

# A trend must move the score by at least this share over its rounds: below it, a monotone
# run of 3 is what noise of the CPU preset's size (run CV about 2%) gives by chance often.
MIN_CHANGE: Final = 0.05
# Mann-Kendall's two-sided level from 5 rounds on (3 and 4 rounds cannot reach it: there a
# strictly monotone run is required instead).
ALPHA: Final = 0.05


@dataclass(frozen=True)
class Trend:
    """What `detect_trend` found over a series of rounds."""

    rounds: int
    direction: str | None  # "rise" | "fall"; None: no trend
    change: float  # Theil-Sen slope x (rounds - 1) / median: the relative change over the span
    kendall_s: int  # Mann-Kendall S: concordant minus discordant pairs
    p_value: float | None  # two-sided, normal approximation (5 rounds or more); else None

    @property
    def found(self) -> bool:
        """True when the rounds trend."""
        return self.direction is not None

    def describe(self, what: str = "score") -> str:
        """e.g. "trend: the score rises 25.5% over 3 rounds (monotone)"."""
        test = "monotone" if self.p_value is None else f"Mann-Kendall p = {self.p_value:.3f}"
        if self.direction is None:
            return (
                f"no trend in the {what} over {self.rounds} rounds "
                f"(change {self.change:+.1%}, {test})"
            )
        verb = "rises" if self.direction == "rise" else "falls"
        return f"trend: the {what} {verb} {abs(self.change):.1%} over {self.rounds} rounds ({test})"

    def to_json(self) -> dict[str, object]:
        """A JSON-able form (for a study attribute or a benchmark's record)."""
        return {
            "rounds": self.rounds,
            "direction": self.direction,
            "change": round(self.change, 4),
            "kendall_s": self.kendall_s,
            "p_value": None if self.p_value is None else round(self.p_value, 4),
        }


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def detect_trend(
    values: Sequence[float], *, min_change: float = MIN_CHANGE, alpha: float = ALPHA
) -> Trend:
    """Do these rounds (in the order they ran) rise or fall beyond noise?

    Args:
        values: One figure per round, in run order (tasks/h of a config, a paired ratio).
        min_change: The smallest relative change over the span that counts as a trend.
        alpha: Mann-Kendall's two-sided level, from 5 rounds on.

    Returns:
        The trend; fewer than 3 rounds never trend (2 points always "move").
    """
    n = len(values)
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    s = sum(_sign(values[j] - values[i]) for i, j in pairs)
    if n < 3:
        return Trend(n, None, 0.0, s, None)
    slope = statistics.median((values[j] - values[i]) / (j - i) for i, j in pairs)
    middle = statistics.median(values)
    change = slope * (n - 1) / middle if middle else 0.0
    p_value: float | None = None
    if n <= 4:
        monotone = abs(s) == len(pairs)
    else:
        var = n * (n - 1) * (2 * n + 5) / 18
        z = (s - _sign(s)) / math.sqrt(var)  # continuity correction
        p_value = math.erfc(abs(z) / math.sqrt(2))
        monotone = p_value < alpha
    direction = None
    if monotone and abs(change) >= min_change:
        direction = "rise" if change > 0 else "fall"
    return Trend(n, direction, change, s, p_value)


def first_round_gap(values: Sequence[float]) -> float | None:
    """Round 1 relative to the mean of the later rounds (-0.1: 10% below); None under 2."""
    if len(values) < 2:
        return None
    rest = statistics.mean(values[1:])
    return values[0] / rest - 1 if rest else None


@dataclass(frozen=True)
class BaselineAt:
    """The baseline's tasks/h at one place in the study's run order (`baseline_at`)."""

    tasks_per_hour: float
    before: float | None  # run-order position of the baseline start at or before it
    after: float | None  # of the next baseline start; None: none yet (or exactly on a start)

    def describe(self) -> str:
        """e.g. "the baseline's 1,050 tasks/h interpolated between its starts at runs 3 and 9"."""
        rate = f"the baseline's {self.tasks_per_hour:,.0f} tasks/h"
        if self.before is not None and self.after is not None:
            return (
                f"{rate} interpolated between its starts at runs {self.before:g} and "
                f"{self.after:g} (drift-corrected)"
            )
        if self.before is None and self.after is not None:
            return f"{rate} of its first start (run {self.after:g}; nothing before it)"
        return (
            f"{rate} of its latest start (run {self.before:g}; no later start yet, so the "
            "drift since then is not corrected)"
        )


def baseline_at(position: float, runs: Sequence[tuple[float, float]]) -> BaselineAt:
    """The baseline's rate at `position` of the run order, from its starts around it.

    Between the two starts that bracket the position, log tasks/h is interpolated linearly in
    run order (a geometric interpolation: a drift of a constant share per run is corrected
    exactly). On a start, that start's rate. Before the first start, the first one. After the
    last start, before the next bracket exists, the latest start's rate: its drift since then
    is not corrected (say so; a later start, a re-run or a confirmation run of the baseline,
    brackets it when it comes).

    Args:
        position: Where the trial ran in the study's order of server starts.
        runs: (position, tasks/h) of each baseline start; rates must be positive.

    Raises:
        ValueError: no runs, or a rate that is not positive.
    """
    if not runs:
        raise ValueError("baseline_at needs at least one baseline start")
    if any(tph <= 0 for _, tph in runs):
        raise ValueError("baseline starts must have a positive tasks/h")
    ordered = sorted(runs)
    earlier = [r for r in ordered if r[0] <= position]
    later = [r for r in ordered if r[0] > position]
    if not earlier:
        first = later[0]
        return BaselineAt(first[1], None, first[0])
    p0, b0 = earlier[-1]
    if p0 == position or not later:
        return BaselineAt(b0, p0, None)
    p1, b1 = later[0]
    w = (position - p0) / (p1 - p0)
    rate = math.exp((1 - w) * math.log(b0) + w * math.log(b1))
    return BaselineAt(rate, p0, p1)


def drift_corrected_noise(
    prior: BetweenRunNoise, runs: Sequence[tuple[float, float]], *, reruns: int, every: int
) -> BetweenRunNoise:
    """The prior between-run noise updated by the baseline's own starts, drift removed.

    A straight line in run order is fitted (least squares) through the starts' log tasks/h; the
    residuals' sum of squares, doubled (a round's log ratio is the difference of two starts),
    is the study's own evidence over m - 2 degrees of freedom (`combine_noise`): a linear drift
    does not count as noise, as it is corrected (`baseline_at`). Under 3 starts nothing is left
    after the line, and the prior stands alone (its source says why).

    Args:
        prior: The recorded prior (the preset's, or the stored one).
        runs: (position in run order, tasks/h) of each baseline start.
        reruns: How many of them were re-runs during the search.
        every: The search's interval between re-runs, in sampled trials (0: not recorded).
    """
    points = sorted((p, math.log(v)) for p, v in runs if v > 0)
    m = len(points)
    interval = f", every {every} trial{'s' if every != 1 else ''}" if every > 0 else ""
    runs_word = f"{reruns} re-run{'s' if reruns != 1 else ''}"
    starts = f"this study's {m} baseline starts ({runs_word} during the search{interval})"
    if m < 3:
        return BetweenRunNoise(
            prior.log_sd,
            prior.df,
            f"{prior.source.split('; with ')[0]}; {starts}: too few to add to it once a drift "
            "line is fitted",
        )
    xs, ys = [p for p, _ in points], [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx > 0 else 0.0
    squares = 2 * sum((y - my - slope * (x - mx)) ** 2 for x, y in points)
    what = f"{starts} about a fitted drift of {math.expm1(slope):+.2%} a run"
    return combine_noise(prior, squares, m - 2, what)
