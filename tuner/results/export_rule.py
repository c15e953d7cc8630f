"""The export rule: which config, if any, beats the baseline (no speculation), and, between
confirmation rounds, whether to run another.

Of the configs whose paired test against the baseline passes Holm's correction over every
config judged (family-wise one-sided `WIN_ALPHA`), the one with the highest paired ratio;
none: the baseline. `tuner export` (`tuner.results.export.choose_export`) applies it to a
study's verdicts (`tuner.results.decision`), the load sweep (`tuner.results.load_sweep
.winner_at`) at each load. Why the bar is that high: docs/decisions.md.

Sequential confirmation (`--confirm K,MAX`): the verdict is looked at after `first_look`
rounds and after every round after it, up to MAX; the stage stops at the first look where a
config wins, or where no config can still be worth it (futility: every config's one-sided
upper bound at `FUTILE_LEVEL` is below `FUTILE_BELOW`, a 5% gain), else at MAX. A config that
is futile while another is not gets no more rounds (it is dropped; its verdict stands on the
rounds it ran). Futility is non-binding: it only stops rounds, never lets a config win, so it
adds no false wins; what it costs is power, a true gain whose early rounds read low, and the
decision simulation (benchmarks/decision_sim.py) measures both that and the server runs it
saves.

Looking several times at growing data would let chance through more often than `WIN_ALPHA`,
so each look spends a part of it: a Lan-DeMets spending function of the O'Brien-Fleming
type, alpha(t) = 2 - 2 Phi(z_{1 - WIN_ALPHA/2} / sqrt(t)) at information fraction
t = rounds / MAX, turned into one nominal one-sided level per look by the boundaries' joint
distribution (`look_levels`). Early looks need an overwhelming
win; the last look's level is close to `WIN_ALPHA`. The decision simulation
(benchmarks/decision_sim.py) checks the false wins this gives at the machines' noise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from statistics import NormalDist
from typing import Final

from tuner.metrics import PairedEstimate, holm

__all__ = [
    "FIRST_LOOK",
    "FUTILE_BELOW",
    "FUTILE_LEVEL",
    "WIN_ALPHA",
    "Look",
    "export_winner",
    "look_level",
    "look_levels",
    "next_look",
]

# One-sided family-wise error of "beats the baseline" over the configs judged (Holm).
WIN_ALPHA: Final = 0.025
# Rounds before the first look at a sequential confirmation.
FIRST_LOOK: Final = 2
# A look stops for futility when every config's one-sided upper bound at FUTILE_LEVEL (95%
# confidence) is below this ratio: even its optimistic end is less than a 5% gain, not worth
# more server starts. Chosen on the decision simulation (docs/decisions.md): the rule before
# (the two-sided 95% interval below a 2% gain) almost never stopped a copy of the baseline, so
# an A/A study ran to its cap.
FUTILE_BELOW: Final = 1.05
FUTILE_LEVEL: Final = 0.05
# Paths of the seeded Monte Carlo that places the boundaries (their levels move by about 1%).
_PATHS: Final = 200_000


def export_winner(
    tests: Mapping[int, PairedEstimate | None], alpha: float = WIN_ALPHA
) -> int | None:
    """The export rule: which config, if any, beats the baseline.

    Args:
        tests: Every config judged (by trial number, or any int key), with its paired
            estimate against the baseline; None for a config that cannot win (nothing paired,
            it changes outputs, it could not start reliably). It still counts in the
            correction: it was judged.
        alpha: The family-wise one-sided level (a sequential look's, `look_level`).

    Returns:
        Of the configs whose one-sided test passes Holm's step-down at family-wise `alpha`
        over all of `tests`, the one with the highest paired ratio (a tie goes to the first
        in `tests`' order); None when none passes, which exports the baseline.
    """
    p_values = {k: (e.p_value if e is not None else 1.0) for k, e in tests.items()}
    winners = holm(p_values, alpha)
    ranked = [(e.ratio, k) for k, e in tests.items() if k in winners and e is not None]
    if not ranked:
        return None
    best = max(ratio for ratio, _ in ranked)
    return next(k for ratio, k in ranked if ratio == best)


def _spent(t: float) -> float:
    if t <= 0:
        return 0.0
    z = NormalDist().inv_cdf(1 - WIN_ALPHA / 2)
    return 2 - 2 * NormalDist().cdf(z / math.sqrt(min(t, 1.0)))


@cache
def look_levels(first: int, max_rounds: int) -> tuple[float, ...]:
    """The nominal one-sided level of each look, rounds `first`..`max_rounds`.

    The z statistics of the looks at r rounds (equal information a round) are those of a
    random walk; boundary c_r is set so that the chance of crossing first at look r is
    alpha(r / MAX) - alpha(previous look / MAX), found on a seeded Monte Carlo of the walk
    (deterministic), and the level is 1 - Phi(c_r). With one look it is `WIN_ALPHA`.
    """
    import numpy as np

    first = max(1, min(first, max_rounds))
    if first >= max_rounds:
        return (WIN_ALPHA,)
    rng = np.random.default_rng(20261202)
    walk = np.cumsum(rng.standard_normal((_PATHS, max_rounds)), axis=1)
    alive = np.ones(_PATHS, dtype=bool)
    levels = []
    previous = 0.0
    for r in range(first, max_rounds + 1):
        z = walk[:, r - 1] / math.sqrt(r)
        spend = _spent(r / max_rounds) - previous
        previous += spend
        # c such that P(alive and z > c) = spend
        alive_z = np.sort(z[alive])[::-1]
        k = round(spend * _PATHS)
        c = float(alive_z[k]) if 0 < k < alive_z.size else float("inf") if k <= 0 else -1e9
        levels.append(1 - NormalDist().cdf(c) if math.isfinite(c) else 0.0)
        alive &= z <= c
    return tuple(levels)


def look_level(rounds: int, first: int, max_rounds: int) -> float:
    """The one-sided level of the look after `rounds` rounds (past MAX: the last look's)."""
    levels = look_levels(first, max_rounds)
    first = max(1, min(first, max_rounds))
    i = min(max(rounds - first, 0), len(levels) - 1)
    return levels[i]


@dataclass(frozen=True)
class Look:
    """One look at a sequential confirmation: stop or run another round, and why."""

    rounds: int
    level: float
    stop: bool
    winner: int | None
    reason: str
    # Configs that cannot win any more (futile, or nothing paired): when the stage goes on,
    # they get no more rounds; their verdicts stand on the rounds they ran.
    futile: tuple[int, ...] = ()


def next_look(
    tests: Mapping[int, PairedEstimate | None], rounds: int, first: int, max_rounds: int
) -> Look:
    """Whether the confirmation stops after `rounds` rounds (see the module docstring)."""
    level = look_level(rounds, first, max_rounds)
    winner = export_winner(tests, level)
    if winner is not None:
        e = tests[winner]
        assert e is not None
        return Look(
            rounds,
            level,
            True,
            winner,
            f"#{winner} beats the baseline at this look's level (one-sided p = "
            f"{e.p_value:.2g} <= {level:.2g})",
        )
    futile = tuple(k for k, e in tests.items() if e is None or e.upper(FUTILE_LEVEL) < FUTILE_BELOW)
    gain = f"{100 * (FUTILE_BELOW - 1):.0f}%"
    bound = f"one-sided {100 * (1 - FUTILE_LEVEL):.0f}% upper bound"
    if len(futile) == len(tests):
        return Look(
            rounds,
            level,
            True,
            None,
            f"no config can still beat the baseline by {gain} (every {bound} is below it)",
            futile,
        )
    if rounds >= max_rounds:
        return Look(rounds, level, True, None, f"the cap of {max_rounds} rounds, undecided", futile)
    if level > 0:
        reason = f"undecided at level {level:.2g}: one more round"
    else:
        # O'Brien-Fleming spends (almost) nothing at the earliest looks: none can be a win.
        later = next(
            r for r in range(rounds + 1, max_rounds + 1) if look_level(r, first, max_rounds) > 0
        )
        reason = f"undecided (a win can be declared from round {later} on): one more round"
    if futile:
        names = ", ".join(f"#{k}" for k in futile)
        reason += (
            f" without {names} (its {bound} is under a {gain} gain, or nothing is paired)"
            if len(futile) == 1
            else f" without {names} (their {bound}s are under a {gain} gain, or nothing is paired)"
        )
    return Look(rounds, level, False, None, reason, futile)
