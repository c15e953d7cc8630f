"""What the study loop is given and what it returns: `LoopSettings` (how one `run()` behaves),
`RequestFactory` (a trial's request from its params) and `LoopOutcome` (how a run ended).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import optuna

from tuner.study.search.pruning import PruneRule
from tuner.study.search.sampling import SamplerFactory, make_sampler
from tuner.study.trial.request import TrialRequest

if TYPE_CHECKING:
    from tuner.study.search.budget import Budget

__all__ = ["LoopOutcome", "LoopSettings", "RequestFactory"]

RequestFactory = Callable[[optuna.Trial, dict[str, Any]], TrialRequest]


@dataclass(frozen=True)
class LoopSettings:
    """How one `run()` behaves.

    Attributes:
        n_trials: Trials that start a server wanted from this run (see `budget_target`);
            None runs the queued (WAITING) trials only, e.g. `tuner explain`'s controls.
        seed: The study seed the sampler's seeds derive from (None: not reproducible).
        timeout_s: Stop starting trials after this many seconds of backend time.
        prune_rule: When a candidate is stopped early.
        sampler_factory: The sampler of each draw, from (derived seed, n_trials).
        poll_s: How long one `backend.wait()` may block.
        baseline_every: Start the baseline again after every this many sampled trials (a
            `Role.BASELINE_RERUN`, uncounted; `rerun_due`); 0: never. Budgeted runs only.
        budget: The command's time budget (`tuner.study.search.budget`, `--budget`): it
            measures every run; in a search it sets the target (its plan's trials, revised
            after each run) and starts no trial that cannot finish before the time the
            confirmation needs.
    """

    n_trials: int | None
    seed: int | None = 0
    timeout_s: float | None = None
    prune_rule: PruneRule = field(default_factory=PruneRule)
    sampler_factory: SamplerFactory = make_sampler
    poll_s: float = 0.5
    also_try_baseline: bool = False  # queue the baseline's config again as a candidate (A/A)
    baseline_every: int = 0
    budget: Budget | None = None


@dataclass(frozen=True)
class LoopOutcome:
    """How a `run()` ended."""

    target: int | None
    resumed_target: bool
    exhausted_size: int | None  # the space's size when every config was measured
    recovered: tuple[int, ...]
    budget_stopped: bool = False  # the budget's guard ended the search before its target
    # An earlier run stopped during its confirmation stage (`StudyAttr.CONFIRM_PENDING`): this
    # run searched nothing, so the command goes on to finish that stage.
    confirm_pending: bool = False


@dataclass
class _Running:
    slot: int
    trial: optuna.Trial
    role: str
    stopping: bool = False
