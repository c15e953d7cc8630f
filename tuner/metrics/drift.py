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
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["ALPHA", "MIN_CHANGE", "Trend", "detect_trend", "first_round_gap"]

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
