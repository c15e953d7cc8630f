"""What a run of the study is asked for (`OptimizeOptions`, the CLI's options), and how the
study loop reads them (`loop_settings`).

`tuner.study.search.driver` runs a study with them; `tuner.study.pipeline` and the CLI build
them, one record shared by every stage of the command.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.study.search.budget import Budget
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.progress import ProgressLines
from tuner.study.search.pruning import PruneRule, ScreenRule
from tuner.study.search.roles import DEFAULT_BASELINE_EVERY
from tuner.study.space import Preset

__all__ = ["OptimizeOptions", "loop_settings"]


@dataclass(frozen=True)
class OptimizeOptions:
    """How to run a study (the CLI's options)."""

    storage_url: str
    cache_dir: Path
    study_name: str | None = None
    n_trials: int = 20
    timeout_s: float | None = None
    ray_address: str | None = None
    seed: int | None = 0
    show_progress: bool = True
    also_try_baseline: bool = False  # an A/A check: the baseline's config as a candidate too
    # Re-run the baseline after every this many sampled trials (uncounted; 0: never): the
    # search's own drift and noise (tuner.study.search.roles.DEFAULT_BASELINE_EVERY says why 5).
    baseline_every: int = DEFAULT_BASELINE_EVERY
    # One plain line per event where output is not a terminal (tuner.study.search.progress); it
    # lives for the whole command, so its ETA spans the search and the confirmation.
    progress: ProgressLines | None = None
    # Screen candidates on a prefix of the workload (tuner.study.search.pruning.ScreenRule);
    # None: as the preset says (`Preset.screening`).
    screening: bool | None = None
    # Search the preset's space as written (no tuner.study.preflight.sizing.workload_reductions).
    full_space: bool = False
    # The command that resumes this run, said when Ctrl-C stops it (the CLI's own argv).
    resume_command: str | None = None
    # Size the workload on the study's first server (tuner.study.preflight.plan); False keeps
    # the preset's sizing (`--no-calibrate`).
    calibrate: bool = True
    # Servers at once (`--slots`); None: the preset's gpu.count / tensor_parallel_size.
    slots: int | None = None
    # The command's time budget (`--budget`, tuner.study.search.budget): the search runs its
    # plan's trials (`n_trials` is the first plan's, revised on measured runs) and the
    # confirmation what the time left buys. Shared by every stage of the command.
    budget: Budget | None = None


def loop_settings(
    options: OptimizeOptions, *, budgeted: bool, preset: Preset | None = None
) -> LoopSettings:
    """The loop's settings for a run of `options`: screening (`ScreenRule()`) when
    `options.screening` says so, or, when it says nothing, when the preset does."""
    screening = options.screening
    if screening is None:
        screening = preset.screening if preset is not None else False
    return LoopSettings(
        n_trials=options.n_trials if budgeted else None,
        seed=options.seed,
        timeout_s=options.timeout_s,
        also_try_baseline=options.also_try_baseline and budgeted,
        baseline_every=options.baseline_every,
        prune_rule=PruneRule(screening=ScreenRule() if screening else None),
        budget=options.budget,
    )
