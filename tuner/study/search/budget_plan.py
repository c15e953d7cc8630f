"""How a `--budget`'s server runs are spent: the search's share and the confirmation's rounds.

`split_runs` divides the runs: `BUDGET_SEARCH_SHARE` of them to the search (the replay's
choice, not a hand-set one), the rest to the confirmation: the floor start (the baseline's
second start, for the correctness probe) and rounds of the top K finalists and the baseline.
The floor start is the baseline's run of the first round. Runs left over by the rounding go
back to the search; a search capped by `--n-trials` or by the space's size gives its runs to
the confirmation; finalists are at most the candidates the search will have.

Arithmetic on run counts only: what one run costs, the clock and the guards are
`tuner.study.search.budget.Budget`'s, which calls `split_runs` on each revision of its plan.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from tuner.results.export_rule import FIRST_LOOK

__all__ = [
    "BUDGET_SEARCH_SHARE",
    "BudgetPlan",
    "finalists",
    "search_share",
    "split_runs",
]

# The search's share of the budget's server runs, keyed by the budget as a fraction of the
# grid's cost (every config of the space run once). The replay's choice, not a hand-set one:
# `python benchmarks/sample_efficiency.py --total-budget` replays studies through the shipped
# confirmation stage at 10%, 25% and 50% of the grid's total cost and keeps the split with the
# least mean regret at 5% run noise on seeds apart from the table's
# (benchmarks/data/sample-efficiency-split-smollm2-135m-cpu-large.json, `totals.*.search_share`;
# tests/unit/test_study_budget.py checks these numbers are that file's).
BUDGET_SEARCH_SHARE: Final[Mapping[float, float]] = MappingProxyType(
    {0.10: 0.9, 0.25: 0.7, 0.50: 0.8}
)


def search_share(grid_fraction: float | None) -> float:
    """The search's share of the runs for a budget of `grid_fraction` of the grid's cost:
    `BUDGET_SEARCH_SHARE` interpolated linearly, its end values beyond its ends (None: the
    space is not enumerable; the middle entry)."""
    points = sorted(BUDGET_SEARCH_SHARE.items())
    if grid_fraction is None:
        return points[len(points) // 2][1]
    if grid_fraction <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if grid_fraction <= x1:
            return y0 + (y1 - y0) * (grid_fraction - x0) / (x1 - x0)
    return points[-1][1]


@dataclass(frozen=True)
class BudgetPlan:
    """How a number of server runs is spent.

    Attributes:
        runs: The server runs the budget buys (this command).
        trials: Search trials (the baseline's first start among them in a new study).
        reruns: The baseline's re-runs during the search (`roles.search_reruns`).
        k: Finalists confirmed (0: no confirmation rounds).
        rounds: Confirmation rounds at most; the baseline's run of the first is the floor
            start.
        floor: Runs of the floor start when no round runs (0 or 1).
    """

    runs: int
    trials: int
    reruns: int
    k: int
    rounds: int
    floor: int

    @property
    def confirm_runs(self) -> int:
        """Every round's runs (the baseline and the `k` finalists; the floor start is the
        baseline's run of the first), or the floor start alone."""
        return (self.k + 1) * self.rounds if self.k and self.rounds else self.floor

    def describe(self) -> str:
        """E.g. "up to 4 trials (1 baseline re-run), then confirmation of the top 1 and the
        baseline for up to 2 rounds (the floor start included)"."""
        again = f" ({self.reruns} baseline re-run{'s' if self.reruns != 1 else ''})"
        search = f"up to {self.trials} trial{'s' if self.trials != 1 else ''}"
        search += again if self.reruns else ""
        if self.k and self.rounds:
            rounds = f"{self.rounds} round{'s' if self.rounds != 1 else ''}"
            confirm = (
                f"confirmation of the top {self.k} and the baseline for up to {rounds} (the "
                "floor start included)"
            )
        elif self.floor:
            confirm = "the floor start only (no confirmation round fits)"
        else:
            confirm = "no confirmation (no round fits)"
        return f"{search}, then {confirm}"


def finalists(runs: int, k: int, rounds: int) -> tuple[int, int]:
    """(finalists, rounds) that `runs` confirmation runs buy, a round being the baseline and
    the finalists.

    The most rounds up to the first look (`FIRST_LOOK`: no verdict is looked at before it),
    then the most finalists (at most `k`), then the most rounds (at most `rounds`).
    """
    best = (0, 0)
    for kk in range(k, 0, -1):
        r = min(rounds, runs // (kk + 1))
        if r > 0 and min(r, FIRST_LOOK) > min(best[1], FIRST_LOOK):
            best = (kk, r)
    return best


def split_runs(
    runs: int,
    *,
    share: float,
    k: int,
    rounds: int,
    floor: bool,
    baseline_every: int,
    trials_cap: int | None = None,
    trials_before: int = 0,
) -> BudgetPlan:
    """`runs` server runs as a search and a confirmation (see the module doc).

    Args:
        runs: Server runs the budget buys.
        share: The search's share of them (`search_share`).
        k, rounds: The confirmation's caps (`--confirm K,R`, the preset's, the default).
        floor: Whether the floor start runs without confirmation rounds
            (`confirm.floor_start_needed`).
        baseline_every: The search's baseline re-runs (`--baseline-every`).
        trials_cap: At most this many trials (`--n-trials`, the space's size).
        trials_before: The study's counted trials before this command (its baseline among
            them when there are any): with this command's, the candidates to confirm.
    """
    from tuner.study.search.roles import search_reruns

    def trials_in(n: int) -> int:
        t = n
        while t > 0 and t + search_reruns(t, baseline_every) > n:
            t -= 1
        if trials_cap is not None:
            t = min(t, trials_cap)
        return t

    def candidates(trials: int) -> int:
        return max(trials_before + trials - 1, 0)

    search = min(runs, max(math.floor(share * runs + 0.5), min(2, runs)))
    trials = trials_in(search)
    k_, r_ = finalists(runs - search, min(k, candidates(trials)), rounds)
    if not (k_ and r_):
        # No round fits: everything but the floor start searches.
        trials = trials_in(runs - (1 if floor and runs > 2 else 0))
    else:
        # The rounding's rest searches, unless the search is capped: then the rounds get it.
        trials = trials_in(runs - (k_ + 1) * r_)
        spent = trials + search_reruns(trials, baseline_every)
        k_, r_ = finalists(runs - spent, min(k, candidates(trials)), rounds)
    spent = trials + search_reruns(trials, baseline_every)
    return BudgetPlan(
        runs=runs,
        trials=trials,
        reruns=search_reruns(trials, baseline_every),
        k=k_,
        rounds=r_,
        floor=1 if floor and not (k_ and r_) and runs > spent else 0,
    )
