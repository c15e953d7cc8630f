"""The decision rules tuner used before issue 21 and before issue 34, for `decision_sim.py`.

Nothing in tuner decides with this module (it lived in tuner/metrics/legacy.py until issue 45).
The simulation runs it side by side with today's rule (`tuner.metrics.paired_ratio`,
`tuner.results.export.choose_export`) to show what the change bought: the old rule
bootstrapped tasks as independent draws (rounds too, when there were several), scaled a
resample's window by its share of the summed task-seconds, and let every candidate pass at its
own one-sided 2.5% with no correction for how many there were. The code below is the old
`paired_ratio` (vectorized, see its docstring) and the old pass test of `choose_export`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from tuner.metrics import BetweenRunNoise, RunOutcomes, percentile

__all__ = [
    "LegacyEstimate",
    "f_test_noise_for_study",
    "f_test_paired_ratio",
    "legacy_paired_ratio",
    "legacy_winner",
]


@dataclass(frozen=True)
class LegacyEstimate:
    """The old paired estimate: ratio of mean tasks/h and a task (and round) bootstrap."""

    ratio: float
    low: float
    high: float

    @property
    def beats(self) -> bool:
        """The old pass test: the whole interval above 1."""
        return self.low > 1.0


def _only(run: RunOutcomes, ids: set[str]) -> RunOutcomes:
    kept = tuple(o for o in run.outcomes if o[0] in ids)
    if len(kept) == len(run.outcomes):
        return run
    total = sum(o[2] for o in run.outcomes)
    share = sum(o[2] for o in kept) / total if total > 0 else 1.0
    return RunOutcomes(kept, run.wall_s * share)


def legacy_paired_ratio(
    candidate: Sequence[RunOutcomes],
    baseline: Sequence[RunOutcomes],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> LegacyEstimate | None:
    """The old paired bootstrap of (mean candidate tasks/h) / (mean baseline tasks/h).

    Each resample draws rounds with replacement (when there are several) and task ids with
    replacement, applies the same draw to both sides, and scales each run's window by the
    drawn tasks' share of its task-seconds. The old code looped in Python with `random`; this
    copy draws the same distribution with numpy, so a simulation of thousands of studies runs
    in seconds (the intervals are not bit-identical to the old code's, the rule is the same).
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
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(ids), size=(resamples, len(ids)))
    r = len(pairs)
    rounds = rng.integers(0, r, size=(resamples, r)) if r > 1 else np.zeros((resamples, 1), int)

    def rates(run: RunOutcomes) -> np.ndarray:
        table = {tid: (ok, secs) for tid, ok, secs in run.outcomes}
        ok = np.array([1.0 if table[t][0] else 0.0 for t in ids])
        secs = np.array([table[t][1] for t in ids])
        total = secs.sum()
        wins = ok[picks].sum(axis=1)
        share = secs[picks].sum(axis=1) / total if total > 0 else np.ones(resamples)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.where(share > 0, wins * 3600.0 / (run.wall_s * share), 0.0)
        return out if run.wall_s > 0 else np.zeros(resamples)

    cand = np.stack([rates(c) for c, _ in pairs])  # rounds x resamples
    base = np.stack([rates(b) for _, b in pairs])
    cols = np.arange(resamples)
    num = sum(cand[rounds[:, j], cols] for j in range(rounds.shape[1]))
    den = sum(base[rounds[:, j], cols] for j in range(rounds.shape[1]))
    ratios = sorted(float(x) for x in (num[den > 0] / den[den > 0]))
    tail = (1 - confidence) / 2 * 100
    low, high = percentile(ratios, tail), percentile(ratios, 100 - tail)
    if low is None or high is None:
        return None
    return LegacyEstimate(point, low, high)


def legacy_winner(estimates: dict[int, LegacyEstimate | None]) -> int | None:
    """The old export's pick among the judged configs (the confirmed ones when confirmation
    ran, else every candidate on its one search-time run): the best ratio among those whose
    interval is above 1, each tested alone; None exports the baseline."""
    passing = {n: e for n, e in estimates.items() if e is not None and e.beats}
    if not passing:
        return None
    return max(passing, key=lambda n: (passing[n].ratio, -n))


# The rule between issue 21 and issue 34: the recorded noise pooled with the rounds' spread,
# unless a one-sided F-test at 5% puts the rounds' (or the baseline starts') own spread above
# it, which then replaces it. Kept so that the simulation can show what issue 34 changed.
F_TEST_ALPHA = 0.05


def f_test_noise_for_study(
    recorded: BetweenRunNoise, baseline_tph: Sequence[float]
) -> BetweenRunNoise:
    """The pre-issue-34 `noise_for_study`: the recorded noise, or the baseline starts' own when
    an F-test says they are noisier."""
    logs = [math.log(v) for v in baseline_tph if v > 0]
    m = len(logs)
    if m < 2:
        return recorded
    mean = sum(logs) / m
    own = 2 * sum((x - mean) ** 2 for x in logs) / (m - 1)
    if stats.f.sf(own / recorded.log_sd**2, m - 1, recorded.df) >= F_TEST_ALPHA:
        return recorded
    return BetweenRunNoise(math.sqrt(own), m - 1, "this study's baseline starts (F-test)")


def f_test_paired_ratio(
    candidate: Sequence[RunOutcomes], baseline: Sequence[RunOutcomes], noise: BetweenRunNoise
) -> tuple[float, float] | None:
    """The pre-issue-34 `paired_ratio`: (ratio, one-sided p of "not faster")."""
    pairs = list(zip(candidate, baseline, strict=False))
    if not pairs:
        return None
    common = set.intersection(
        *({tid for tid, _, _ in run.outcomes} for pair in pairs for run in pair)
    )
    logs = []
    for c, b in pairs:
        c_rate, b_rate = c.only(common).tasks_per_hour, b.only(common).tasks_per_hour
        if c_rate <= 0 or b_rate <= 0:
            return None
        logs.append(math.log(c_rate / b_rate))
    r = len(logs)
    mean = sum(logs) / r
    squares = sum((x - mean) ** 2 for x in logs)
    if r > 1 and stats.f.sf(squares / (r - 1) / noise.log_sd**2, r - 1, noise.df) < F_TEST_ALPHA:
        df, sd = r - 1, math.sqrt(squares / (r - 1))
    else:
        df = noise.df + r - 1
        sd = math.sqrt((noise.df * noise.log_sd**2 + squares) / df)
    se = sd / math.sqrt(r)
    p = float(stats.t.sf(mean / se, df)) if se > 0 else (0.0 if mean > 0 else 1.0)
    return math.exp(mean), p
