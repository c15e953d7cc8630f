"""A time budget for one `tuner optimize` command (`--budget 20m`): a plan, and its guards.

The budget buys server runs: its seconds over the cost of one run (a server start, the scored
window and the plain benchmark, plus the driver's gap between two runs). Before anything ran
the cost is the estimate's (`tuner.study.search.estimate.planned_run_s`: the preset's figures,
bounded by the window the first server sizes the workload to on a CPU preset, a GPU preset's
recorded runs of its own model); after each finished run it is this command's measured mean
of its full runs (a screened-out run is shorter and says nothing of a confirmation run).

How those runs divide between the search and the confirmation is
`tuner.study.search.budget_plan.split_runs` (its `BudgetPlan`, the replay's
`BUDGET_SEARCH_SHARE`); `Budget` calls it again each time the cost is revised.

`Budget` carries the plan through the command: the search loop asks it before each new trial
(`may_start_search`: a trial must be able to finish before the time the confirmation needs),
revises the plan after each finished run (the first run's measured cost replaces the
estimate), and the confirmation stage asks it for its plan (`confirm_choice`, from the time
actually left) and before each round (`fits`): a round that cannot finish inside the budget is
not queued, and the stage stops with the reason "the budget".

The confirmation's finalists and cap under a budget are the power's, not `--confirm`'s
rounds: given the study's measured between-run noise (the prior updated by its baseline's
starts, `tuner.results.decision.study_noise`), the cheapest finalists and rounds (fewest runs)
whose simulated power for a true +10% reaches 80% with 1 start in 20 slow and a random walk
(`tuner.study.search.power`, its slow table: what shared boxes show) if the time left pays for
them, else the plan of most power it pays for; `--confirm`'s K, when given, caps the
finalists (when the user fixed no K the pipeline lets the power take up to the table's
largest, `Budget.k_power`).
`confirm_line` says what that buys: the rounds, the power at the study's noise with its
interval, and what 80% would need. A run already started is never
cut short by the budget. The budget counts this command's time: a resumed study gets a fresh
budget for what this command runs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from tuner.study.search import power as power_table
from tuner.study.search.budget_plan import BudgetPlan, finalists, search_share, split_runs

if TYPE_CHECKING:
    from tuner.metrics import BetweenRunNoise

__all__ = [
    "END_RESERVE_S",
    "GAP_S",
    "Budget",
    "ConfirmChoice",
    "choice_at",
    "power_words",
]

# Kept free at the end of the budget: the verdicts, the tables and the dashboard note with its
# plots after the last run (about 10 s on a 2-core box with the fake server), with room.
END_RESERVE_S: Final = 30.0
# The driver's time between two runs before any was measured (recording a trial, a
# confirmation round's look and its workers): a few seconds on a 2-core box.
GAP_S: Final = 5.0


@dataclass(frozen=True)
class ConfirmChoice:
    """The confirmation the budget's time left buys, and the power it has.

    Attributes:
        k: Finalists (0: no round fits).
        rounds: Rounds at most (the floor start, already run, is the baseline's run of the
            first).
        afford: The most rounds of `k` finalists the time left pays for.
        x: The study's noise level (its paired sd over the power table's x1; None: the
            noise was not given and the cap is `--confirm`'s).
        df: The degrees of freedom behind the study's noise (0 with `x` None).
        power: The simulated power of `rounds` at `x` (None with `x`).
        slow: The same with 1 start in 20 slow and a random walk (None with `x`).
        needed: The fewest rounds of `k` that reach 80% with slow starts (None: none within
            the table, or no `x`).
        plan80: The cheapest (finalists, rounds) that reach 80% with slow starts, at most the
            table's largest K (None: none within the table, or no `x`).
    """

    k: int
    rounds: int
    afford: int
    x: float | None = None
    df: int = 0
    power: power_table.PowerAt | None = None
    slow: power_table.PowerAt | None = None
    needed: int | None = None
    plan80: tuple[int, int] | None = None


def choice_at(
    k: int, rounds: int, noise: BetweenRunNoise, afford: int | None = None
) -> ConfirmChoice:
    """`k` finalists for up to `rounds` rounds and the power they have at the study's measured
    `noise` (its paired sd of a round's log ratio): the simulated power, the same with slow
    starts, the fewest rounds of `k` and the cheapest plan that reach `TARGET_POWER` with slow
    starts. `afford`: the rounds the time left pays for (no budget: `rounds`)."""
    x = noise.log_sd / power_table.X1_PAIRED_SD
    slow = power_table.SLOW_WALK
    return ConfirmChoice(
        k,
        rounds,
        rounds if afford is None else afford,
        x=x,
        df=noise.df,
        power=power_table.power_at(k, x, rounds),
        slow=power_table.power_at(k, x, rounds, noise=slow),
        needed=power_table.rounds_for(k, x, noise=slow),
        plan80=power_table.plan_for(x, power_table.LARGEST_K),
    )


def power_words(head: str, choice: ConfirmChoice, cost: str | None = None) -> str:
    """`head` (what the confirmation runs), then the power `choice` has at the study's noise
    and, when short of `TARGET_POWER`, what would reach it (`cost`: the time those rounds
    take, when known)."""
    if choice.x is None or choice.power is None or choice.slow is None:
        return head
    p, slow = choice.power, choice.slow
    lo, hi = p.interval
    bound = "at most " if p.beyond else "about "
    level = f"x{choice.x:.1f} the fitted, over {choice.df} df"
    if p.beyond:
        level += f", past the table's x{power_table.POWER_LEVELS[-1]:g}"
    power = (
        f"{bound}{p.power:.0%} power for a true +10% (simulated, 95% interval "
        f"{lo:.0%}-{hi:.0%}; {slow.power:.0%} with 1 start in 20 slow)"
    )
    target = f"{power_table.TARGET_POWER:.0%} with 1 start in 20 slow"
    if choice.rounds == choice.needed:
        return f"{head}, the fewest that reach {target} at this study's noise ({level}): {power}"
    if choice.needed is not None and choice.rounds > choice.needed:
        return f"{head}; at this study's noise ({level}) that is {power}"
    if choice.plan80 is None:
        short = (
            f"{target} is not reached within {power_table.POWER_CAPS[-1]} rounds of up to "
            f"{power_table.LARGEST_K} finalists at this noise"
        )
    else:
        k80, r80 = choice.plan80
        short = f"{target} needs the top {k80} for {r80} rounds" + (f", {cost}" if cost else "")
    return f"{head}; at this study's noise ({level}) that is {power}; {short}"


@dataclass
class Budget:
    """The command's budget: its plan, revised on measured runs, and its guards.

    Attributes:
        budget_s: The budget, seconds from `start`.
        k, rounds: The confirmation's caps.
        floor: Whether the floor start runs.
        baseline_every: The search's baseline re-runs.
        estimate_s: One run's seconds before any was measured (None: not known, e.g. a GPU
            preset with no recorded run of its model: the first run measures it).
        estimate_source: Where `estimate_s` comes from, for the plan line.
        trials_cap: `--n-trials` (None: no cap but the space's).
        slots: Servers at once.
        clock: Seconds, monotonic (the study loop's backend clock in a simulation).
        start: The clock when the command started (None: now).
        space_size: Configs in the space (None: not enumerable): a cap on the trials, and the
            grid whose cost the share is read at.
        k_power: The most finalists the confirmation's power choice may take (None: `k`).
            The split plans `k`; when the user fixed no K the pipeline gives the power table's
            largest here, because at a noisy box the search's top 2 miss the true best too
            often for any cap of rounds (`confirm_choice`).
    """

    budget_s: float
    k: int
    rounds: int
    floor: bool
    baseline_every: int
    estimate_s: float | None
    estimate_source: str = "the preset's estimate"
    trials_cap: int | None = None
    slots: int = 1
    clock: Callable[[], float] = time.monotonic
    start: float | None = None
    space_size: int | None = None
    text: str | None = None  # the budget as the user wrote it (`--budget 20m`)
    trials_before: int = 0  # the study's counted trials before this command
    k_power: int | None = None
    full_runs: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    runs_done: int = 0
    search_runs: int = 0  # this command's finished search runs (trials and baseline re-runs)
    stopped_search: bool = False  # the guard stopped the search before its target

    def __post_init__(self) -> None:
        if self.start is None:
            self.start = self.clock()
        self._running = 0
        self._last_end: float | None = None

    # ---- measurement ----------------------------------------------------------------------

    @property
    def measured(self) -> bool:
        """Whether a full run of this command has been measured."""
        return bool(self.full_runs)

    def run_s(self) -> float | None:
        """One run's seconds with the gap before it: measured once a full run finished."""
        run = sum(self.full_runs) / len(self.full_runs) if self.full_runs else self.estimate_s
        if run is None:
            return None
        gap = sum(self.gaps) / len(self.gaps) if self.gaps else GAP_S
        return run + gap

    def run_started(self) -> None:
        """A server run began (the gap since the last one ended is measured)."""
        now = self.clock()
        if self._running == 0 and self._last_end is not None:
            self.gaps.append(now - self._last_end)
        self._running += 1

    def run_finished(self, seconds: float, *, full: bool, search: bool) -> None:
        """A run ended after `seconds`; `full`: it ran its whole workload (not screened out,
        not failed), so its time is what a confirmation run costs."""
        self._running = max(0, self._running - 1)
        if self._running == 0:
            self._last_end = self.clock()
        self.runs_done += 1
        self.search_runs += 1 if search else 0
        if full:
            self.full_runs.append(seconds)

    # ---- the plan ---------------------------------------------------------------------------

    @property
    def deadline(self) -> float:
        """The clock at which the budget is spent."""
        assert self.start is not None
        return self.start + self.budget_s

    def left_s(self) -> float:
        """Seconds left for server runs (the end's reserve kept free)."""
        return self.deadline - self.clock() - END_RESERVE_S

    def _runs_in(self, seconds: float, run_s: float) -> int:
        return max(0, math.floor(seconds / run_s)) * max(1, self.slots)

    def share(self) -> float:
        """The search's share for this budget (`search_share` of its grid fraction)."""
        run = self.run_s()
        if self.space_size is None or not run:
            return search_share(None)
        return search_share(self.budget_s / (self.space_size * run))

    def plan(self) -> BudgetPlan | None:
        """The plan for the whole command at the current cost (None: no cost known yet)."""
        run = self.run_s()
        if run is None:
            return None
        left = self.left_s() - (0.0 if self.runs_done else GAP_S)
        runs = self.runs_done + self._runs_in(left, run)
        cap = self.trials_cap
        if self.space_size is not None:
            cap = self.space_size if cap is None else min(cap, self.space_size)
        return split_runs(
            runs,
            trials_before=self.trials_before,
            share=self.share(),
            k=self.k,
            rounds=self.rounds,
            floor=self.floor,
            baseline_every=self.baseline_every,
            trials_cap=cap,
        )

    def may_start_search(self, confirm_runs: int) -> bool:
        """Whether one more search run can finish before the time `confirm_runs` need."""
        run = self.run_s()
        if run is None:
            return self.runs_done == 0  # the first wave measures the cost
        waves = math.ceil(confirm_runs / max(1, self.slots))
        return run * (1 + waves) <= self.left_s()

    def fits(self, runs: int) -> bool:
        """Whether `runs` more server runs (`slots` at a time) can finish inside the budget."""
        run = self.run_s()
        if run is None:
            return True
        return math.ceil(runs / max(1, self.slots)) * run <= self.left_s()

    def confirm_plan(self) -> tuple[int, int]:
        """(finalists, rounds) the time left buys once the floor start ran (the baseline's
        run of the first round): at most `k` (or `k_power`) finalists, at most the power
        table's largest cap of rounds (the power then chooses within it, `confirm_choice`)."""
        run = self.run_s()
        if run is None:
            return self.k, self.rounds
        runs = self._runs_in(self.left_s(), run) + 1
        return finalists(runs, max(self.k, self.k_power or 0), power_table.POWER_CAPS[-1])

    def confirm_choice(self, noise: BetweenRunNoise | None) -> ConfirmChoice:
        """The finalists and rounds the time left buys once the floor start ran, chosen by the
        power at the study's measured noise (`noise`: the paired sd of a round's log ratio,
        `tuner.results.decision.study_noise`): the cheapest plan of at most `k` finalists that
        reaches `TARGET_POWER` with slow starts, else the plan of most power the time left
        pays for (`k_power` finalists at most, when given). None: `confirm_plan`'s
        finalists, `--confirm`'s rounds the cap."""
        k, afford = self.confirm_plan()
        if not k or not afford:
            return ConfirmChoice(0, 0, 0)
        runs = (k + 1) * afford  # what `confirm_plan` found the time left buys
        if self.run_s() is None:
            return ConfirmChoice(k, min(afford, self.rounds), afford)
        if noise is None:  # no noise to choose by: `k` finalists, as planned
            k, afford = finalists(runs, self.k, power_table.POWER_CAPS[-1])
            return ConfirmChoice(k, min(afford, self.rounds), afford)
        x = noise.log_sd / power_table.X1_PAIRED_SD
        most = max(self.k, self.k_power or 0)
        kk, rounds = power_table.plan_for(x, most, runs) or power_table.best_within(x, most, runs)
        if not kk:
            return ConfirmChoice(0, 0, 0)
        return choice_at(kk, rounds, noise, min(power_table.POWER_CAPS[-1], runs // (kk + 1)))

    # ---- words ------------------------------------------------------------------------------

    def plan_line(self) -> str:
        """The first line: what the budget buys and how it is split."""
        from tuner.study.search.estimate import minutes

        plan = self.plan()
        head = f"plan: budget {self.text or minutes(self.budget_s)}"
        if plan is None:
            return (
                f"{head}: one run's cost on this machine is not known before the first run "
                f"({self.estimate_source}); the first run measures it and the plan follows"
            )
        run = self.run_s()
        share = f"{self.share():.0%} of the runs to the search (the replay's split)"
        return (
            f"{head}: about {plan.runs} server runs of about {run:.0f} s with the gap between "
            f"runs ({self.estimate_source}): {plan.describe()}; {share}; revised on each run's "
            "measured cost"
        )

    def confirm_line(self, choice: ConfirmChoice) -> str:
        """What the time left buys for the confirmation, and its power at the study's noise,
        e.g. "confirmation: the budget's about 12 min left at about 70 s a run buys the top 2
        and the baseline for up to 6 rounds; at this study's noise (x2.1 the fitted) that is
        about 62% power for a true +10% (...)"."""
        from tuner.study.search.estimate import minutes

        run = self.run_s()
        left = minutes(max(self.left_s(), 0.0))
        at = f" at about {run:.0f} s a run" if run is not None else ""
        if not choice.k or not choice.rounds:
            return f"confirmation: no round fits the budget's {left} left{at}"
        rounds = f"{choice.rounds} round{'s' if choice.rounds != 1 else ''}"
        head = (
            f"confirmation: the budget's {left} left{at} buys the top {choice.k} and the "
            f"baseline for up to {rounds}"
        )
        cost = None
        if choice.plan80 is not None:
            # The floor start, already run, is the first round's baseline run.
            k80, r80 = choice.plan80
            runs = (k80 + 1) * r80 - 1
            cost = minutes(math.ceil(runs / max(1, self.slots)) * (run or 0.0))
        return power_words(head, choice, cost)

    def revised_line(self, plan: BudgetPlan) -> str:
        """The plan again, on this command's measured runs."""
        from tuner.study.search.estimate import minutes

        run = self.run_s()
        return (
            f"plan revised on {len(self.full_runs)} measured run"
            f"{'s' if len(self.full_runs) != 1 else ''} (about {run:.0f} s a run with the gap "
            f"between runs, {minutes(max(self.left_s(), 0))} left): {plan.describe()}"
        )
