"""The power a confirmation buys: how often rounds of the top K finalists and the baseline find a
true +10%, by the study's noise and the rounds' cap, read from the decision simulation's table.

`benchmarks/decision_sim.py --power-table` simulates whole studies (a search of five candidates,
one truly x1.10, then the shipped confirmation stage and export) at noise levels x1-x6 of the
fitted quietest machine, for caps of 1-30 rounds and 1-4 finalists, and writes
benchmarks/data/decision-sim-power.json. `CONFIRM_POWER` is that file's power, copied here
because the product does not read benchmarks/ (tests/unit/test_study_budget.py checks the two
are equal). A level is the study's between-run noise (the paired sd of one round's log ratio,
`tuner.metrics.BetweenRunNoise.log_sd`) over the x1 machine's (`X1_PAIRED_SD`).

`power_at` interpolates the table linearly in the level and in the rounds (clamped to its
ends: below x1 it reads x1, past x6 it reads x6 and says so); `rounds_for` is the fewest
rounds whose power reaches a target; `plan_for` the cheapest finalists and rounds that reach it
(fewest runs), `best_within` the most power a number of runs buys. Each figure is a share of
`STUDIES` simulated studies: `interval` is its Wilson 95% interval. More finalists than the
table has read its largest K's row.

Finalists matter as much as rounds at a noisy machine: the search runs each config once, so at
x4.25 with slow starts the true +10% is outside the search's top 2 in about a quarter of the
studies, and no cap of rounds of 2 finalists reaches 80% (docs/decision-sim.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "CONFIRM_POWER",
    "FITTED",
    "LARGEST_K",
    "POWER_CAPS",
    "POWER_LEVELS",
    "SLOW_WALK",
    "STUDIES",
    "TARGET_POWER",
    "X1_PAIRED_SD",
    "PowerAt",
    "best_within",
    "plan_for",
    "power_at",
    "rounds_for",
]

# The power the confirmation aims for when a budget can pay for it (the decision simulation's
# goal, docs/decision-sim.md).
TARGET_POWER: Final = 0.80
# The table's noises: the fitted model at x, and the same with 5% of starts at x0.75 and a
# random walk of the machine's rate on top (what shared boxes show; `Stress` in the script).
FITTED: Final = "fitted"
SLOW_WALK: Final = "slow+walk"

# ---- benchmarks/data/decision-sim-power.json, copied (the test checks it) ----------------------
X1_PAIRED_SD: Final = 0.0216
STUDIES: Final = 300
POWER_LEVELS: Final[tuple[float, ...]] = (1.0, 2.0, 3.0, 4.0, 6.0)
POWER_CAPS: Final[tuple[int, ...]] = (1, 2, 3, 5, 10, 15, 20, 30)
# noise -> finalists -> level -> power at each of POWER_CAPS.
CONFIRM_POWER: Final[Mapping[str, Mapping[int, Mapping[float, tuple[float, ...]]]]] = (
    MappingProxyType(
        {
            FITTED: {
                1: {
                    1.0: (0.0, 0.03, 0.8733, 0.9967, 1.0, 1.0, 1.0, 1.0),
                    2.0: (0.0, 0.12, 0.5367, 0.9133, 0.91, 0.9033, 0.92, 0.9333),
                    3.0: (0.0, 0.1067, 0.3967, 0.5633, 0.77, 0.7867, 0.7867, 0.7467),
                    4.0: (0.0067, 0.14, 0.22, 0.4, 0.61, 0.63, 0.65, 0.63),
                    6.0: (0.03, 0.1367, 0.1267, 0.2433, 0.3033, 0.37, 0.4233, 0.5067),
                },
                2: {
                    1.0: (0.0, 0.0, 0.32, 1.0, 1.0, 1.0, 1.0, 1.0),
                    2.0: (0.0, 0.0, 0.2133, 0.8833, 0.9733, 0.9833, 0.9667, 0.9667),
                    3.0: (0.0, 0.0233, 0.2067, 0.57, 0.85, 0.8533, 0.9167, 0.8767),
                    4.0: (0.0, 0.0433, 0.2067, 0.3633, 0.7, 0.7767, 0.8, 0.81),
                    6.0: (0.0033, 0.04, 0.1133, 0.18, 0.4, 0.4967, 0.63, 0.66),
                },
                3: {
                    1.0: (0.0, 0.0, 0.0933, 1.0, 1.0, 1.0, 1.0, 1.0),
                    2.0: (0.0, 0.0, 0.11, 0.8, 0.99, 0.99, 0.9933, 0.99),
                    3.0: (0.0, 0.0033, 0.1633, 0.5, 0.92, 0.9633, 0.97, 0.9567),
                    4.0: (0.0, 0.0133, 0.14, 0.3433, 0.7467, 0.8567, 0.9033, 0.9233),
                    6.0: (0.0033, 0.04, 0.08, 0.1867, 0.37, 0.5367, 0.64, 0.7867),
                },
                4: {
                    1.0: (0.0, 0.0, 0.01, 0.9933, 1.0, 1.0, 1.0, 1.0),
                    2.0: (0.0, 0.0, 0.07, 0.67, 1.0, 1.0, 0.9967, 1.0),
                    3.0: (0.0, 0.0, 0.0667, 0.46, 0.95, 0.9833, 0.9933, 0.9933),
                    4.0: (0.0, 0.0067, 0.0933, 0.2833, 0.7033, 0.88, 0.9533, 0.97),
                    6.0: (0.0, 0.0267, 0.08, 0.19, 0.3467, 0.5433, 0.7333, 0.8067),
                },
            },
            SLOW_WALK: {
                1: {
                    1.0: (0.05, 0.0333, 0.66, 0.7467, 0.89, 0.92, 0.93, 0.92),
                    2.0: (0.03, 0.11, 0.4433, 0.6067, 0.8267, 0.82, 0.8233, 0.86),
                    3.0: (0.0267, 0.1367, 0.2567, 0.4, 0.6333, 0.6667, 0.7033, 0.7067),
                    4.0: (0.0133, 0.1367, 0.1633, 0.2667, 0.48, 0.54, 0.6, 0.6033),
                    6.0: (0.0433, 0.0867, 0.1067, 0.1567, 0.25, 0.28, 0.38, 0.4167),
                },
                2: {
                    1.0: (0.0133, 0.0, 0.2533, 0.6367, 0.8233, 0.88, 0.9167, 0.94),
                    2.0: (0.02, 0.0, 0.1733, 0.5267, 0.7933, 0.84, 0.9167, 0.9),
                    3.0: (0.0233, 0.0433, 0.1767, 0.3567, 0.68, 0.72, 0.77, 0.85),
                    4.0: (0.0167, 0.07, 0.13, 0.2567, 0.5467, 0.6133, 0.7167, 0.7367),
                    6.0: (0.0033, 0.09, 0.1033, 0.17, 0.2533, 0.4033, 0.4567, 0.5133),
                },
                3: {
                    1.0: (0.0, 0.0, 0.08, 0.59, 0.86, 0.9033, 0.9, 0.9433),
                    2.0: (0.0, 0.0, 0.1, 0.46, 0.8133, 0.89, 0.9167, 0.9467),
                    3.0: (0.0033, 0.0067, 0.1033, 0.31, 0.6067, 0.77, 0.8367, 0.8967),
                    4.0: (0.0067, 0.01, 0.1, 0.22, 0.54, 0.61, 0.7533, 0.7867),
                    6.0: (0.0067, 0.0333, 0.08, 0.16, 0.3033, 0.4, 0.48, 0.6),
                },
                4: {
                    1.0: (0.0, 0.0067, 0.0233, 0.5833, 0.8433, 0.9033, 0.93, 0.9533),
                    2.0: (0.0, 0.0, 0.0633, 0.4033, 0.77, 0.8767, 0.8933, 0.94),
                    3.0: (0.0, 0.0033, 0.0633, 0.2567, 0.5967, 0.7933, 0.8333, 0.9),
                    4.0: (0.0067, 0.03, 0.0667, 0.2267, 0.5133, 0.6233, 0.77, 0.8633),
                    6.0: (0.0033, 0.0367, 0.05, 0.1167, 0.2633, 0.37, 0.4867, 0.6667),
                },
            },
        }
    )
)
# ------------------------------------------------------------------------------------------------

# The most finalists the table has a row for (a plan may take up to these).
LARGEST_K: Final = max(CONFIRM_POWER[SLOW_WALK])


@dataclass(frozen=True)
class PowerAt:
    """The simulated power of a confirmation at a noise level and a cap.

    Attributes:
        power: The share of simulated studies that export a true +10% (interpolated).
        interval: Its Wilson 95% interval over the table's study count.
        x: The noise level read (the study's, before clamping to the table).
        beyond: The level is past the table's noisiest (the power read there is an upper
            bound).
    """

    power: float
    interval: tuple[float, float]
    x: float
    beyond: bool


def _segment(points: Sequence[float], value: float) -> tuple[int, int, float]:
    """The two neighbouring indices of `points` around `value` (clamped to the ends) and the
    fraction of the way from the first to the second."""
    if value <= points[0]:
        return 0, 0, 0.0
    for (i, a), (j, b) in itertools.pairwise(enumerate(points)):
        if value <= b:
            return i, j, (value - a) / (b - a)
    last = len(points) - 1
    return last, last, 0.0


def power_at(k: int, x: float, rounds: int, *, noise: str = FITTED) -> PowerAt:
    """The power of `rounds` rounds of the top `k` finalists at noise level `x` (bilinear in
    the level and the rounds over `CONFIRM_POWER[noise]`)."""
    from tuner.metrics import wilson_interval

    table = CONFIRM_POWER[noise]
    rows = table[min(max(k, 1), max(table))]
    levels, caps = POWER_LEVELS, [float(c) for c in POWER_CAPS]
    i0, i1, t = _segment(levels, x)
    j0, j1, u = _segment(caps, float(rounds))

    def at(i: int) -> float:
        row = rows[levels[i]]
        return (1 - u) * row[j0] + u * row[j1]

    power = (1 - t) * at(i0) + t * at(i1)
    lo, hi = wilson_interval(round(power * STUDIES), STUDIES)
    return PowerAt(power, (lo, hi), x, x > levels[-1])


def rounds_for(
    k: int, x: float, target: float = TARGET_POWER, *, noise: str = FITTED
) -> int | None:
    """The fewest rounds whose power reaches `target` at level `x` (None: not within the
    table's largest cap, or `x` past the table's noisiest, where its power is only a bound)."""
    if x > POWER_LEVELS[-1]:
        return None
    for rounds in range(1, POWER_CAPS[-1] + 1):
        if power_at(k, x, rounds, noise=noise).power >= target:
            return rounds
    return None


def _plans(x: float, k_max: int, runs: int | None, noise: str) -> list[tuple[float, int, int, int]]:
    """(power, runs, k, rounds) of every plan of at most `k_max` finalists and the table's
    largest cap of rounds that `runs` confirmation runs pay for (a round is the baseline and
    the finalists; None: any)."""
    ks = range(1, min(k_max, max(CONFIRM_POWER[noise])) + 1)
    out = []
    for k in ks:
        for rounds in range(1, POWER_CAPS[-1] + 1):
            cost = (k + 1) * rounds
            if runs is None or cost <= runs:
                out.append((power_at(k, x, rounds, noise=noise).power, cost, k, rounds))
    return out


def plan_for(
    x: float,
    k_max: int,
    runs: int | None = None,
    target: float = TARGET_POWER,
    *,
    noise: str = SLOW_WALK,
) -> tuple[int, int] | None:
    """The cheapest (finalists, rounds), fewest runs first, whose power at level `x` reaches
    `target`, with at most `k_max` finalists and `runs` runs (None: any). None: no plan within
    the table reaches it, or `x` is past the table's noisiest level (its power is only a bound
    there)."""
    if x > POWER_LEVELS[-1]:
        return None
    hits = [(cost, -p, k, r) for p, cost, k, r in _plans(x, k_max, runs, noise) if p >= target]
    if not hits:
        return None
    _, _, k, rounds = min(hits)
    return k, rounds


def best_within(x: float, k_max: int, runs: int, *, noise: str = SLOW_WALK) -> tuple[int, int]:
    """The (finalists, rounds) of most power at level `x` that `runs` runs pay for, fewer runs
    on a tie; (0, 0) when not one round of one finalist fits."""
    plans = _plans(x, k_max, runs, noise)
    if not plans:
        return 0, 0
    _, _, k, rounds = max(plans, key=lambda p: (round(p[0], 6), -p[1]))
    return k, rounds
