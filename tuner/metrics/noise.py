"""The between-run noise of a paired comparison: how much one round's log ratio moves between
fresh starts, and how a study's own repeats update it.

`BetweenRunNoise` is the recorded value (a standard deviation of the log ratio over its degrees
of freedom); `DEFAULT_NOISE` the prior for a machine tuner has not measured. A study's own
repeats update it as a scaled inverse chi-square prior is updated (`combine_noise`): every
repeat moves it by its weight, none switches the prior off. `noise_for_study` does this with a
study's baseline starts; `tuner.metrics.drift` with those starts after their trend;
`tuner.metrics.paired.paired_ratio` with the rounds' own spread.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_NOISE", "BetweenRunNoise", "combine_noise", "noise_for_study"]


@dataclass(frozen=True)
class BetweenRunNoise:
    """How much one round's paired log ratio moves between fresh starts, as measured.

    `log_sd` is the standard deviation of log(candidate tasks/h / baseline tasks/h) of one
    round, from repeated fresh starts of the same configs; `df` its degrees of freedom (how
    many repeats stand behind it). A study stores the value it used
    (`tuner.attrs.StudyAttr.BETWEEN_RUN_NOISE`) so its verdicts can be recomputed.
    """

    log_sd: float
    df: int
    source: str
    # When the value is a prior updated by a study's own repeats: the prior's sd and df.
    prior_sd: float | None = None
    prior_df: int | None = None

    def to_json(self) -> dict[str, Any]:
        """As stored on the study."""
        return {"log_sd": self.log_sd, "df": self.df, "source": self.source}

    def describe(self) -> str:
        """e.g. "run-to-run sd 0.041 of the log ratio over 14 df: prior 0.034 (10 df, ...)
        with this study's 3 rounds (2 df)"."""
        if self.prior_sd is None or self.prior_df is None:
            return f"run-to-run sd {self.log_sd:.3f} of the log ratio ({self.df} df, {self.source})"
        head, _, own = self.source.partition("; with ")
        return (
            f"run-to-run sd {self.log_sd:.3f} of the log ratio over {self.df} df: the prior "
            f"{self.prior_sd:.3f} ({self.prior_df} df, {head}) with {own} "
            f"({self.df - self.prior_df} df)"
        )

    @classmethod
    def from_json(cls, value: object) -> BetweenRunNoise | None:
        """From `to_json`'s dict; None when absent or malformed."""
        if not isinstance(value, Mapping):
            return None
        sd, df = value.get("log_sd"), value.get("df")
        if not isinstance(sd, int | float) or not isinstance(df, int) or sd <= 0 or df < 1:
            return None
        return cls(float(sd), int(df), str(value.get("source") or "stored with the study"))


# The prior of a round's paired log ratio on a machine tuner has not measured: sqrt(2) x the
# between-start sd of log tasks/h pooled over every recorded CPU start, after each session's
# drift (0.046 over 16 df: benchmarks/noise_model.py, benchmarks/data/noise-model.json). Its
# weight is 2 df, not 16: the recorded machines differ about 4x (0.015 on one, 0.063 on the
# other), which a scaled inverse chi-square prior only covers with a few df; a study's own
# rounds soon outweigh it (`combine_noise`). Chosen with benchmarks/decision_sim.py
# (docs/decision-sim.md, docs/decisions.md).
DEFAULT_NOISE = BetweenRunNoise(
    log_sd=0.065,
    df=2,
    source="every recorded CPU start, pooled over machines (docs/decision-sim.md)",
)


def combine_noise(prior: BetweenRunNoise, squares: float, df: int, what: str) -> BetweenRunNoise:
    """The prior between-run noise updated by a study's own repeats (conjugate).

    A scaled inverse chi-square prior on the variance of a round's log ratio, scale s0^2 over
    d0 degrees of freedom (the recorded repeats), updated by `squares` (the study's own sum of
    squared deviations on that scale) over `df` degrees of freedom, is again one: scale
    (d0 s0^2 + squares) / (d0 + df) over d0 + df. Every own repeat moves it, by its weight;
    none switches the prior off (the all-or-nothing F-test it replaces saw too little with
    2 df and, when it fired, threw the 10 recorded df away).
    """
    if df <= 0:
        return prior
    total = prior.df + df
    sd = math.sqrt((prior.df * prior.log_sd**2 + squares) / total)
    head = prior.source.split("; with ")[0]
    return BetweenRunNoise(
        sd,
        total,
        f"{head}; with {what}",
        prior_sd=prior.prior_sd if prior.prior_sd is not None else prior.log_sd,
        prior_df=prior.prior_df if prior.prior_df is not None else prior.df,
    )


def noise_for_study(recorded: BetweenRunNoise, baseline_tph: Sequence[float]) -> BetweenRunNoise:
    """The recorded between-run noise updated by this study's own baseline starts.

    Two fresh starts of the baseline at different times differ in log tasks/h with the same
    variance as a round's paired log ratio of runs at different times (or more: the machine's
    drift between them adds to it), so m baseline starts give twice their sum of squared
    deviations of log tasks/h over m - 1 df (`combine_noise`).
    """
    logs = [math.log(v) for v in baseline_tph if v > 0]
    m = len(logs)
    if m < 2:
        return recorded
    mean = sum(logs) / m
    squares = 2 * sum((x - mean) ** 2 for x in logs)
    return combine_noise(recorded, squares, m - 1, f"this study's {m} baseline starts")
