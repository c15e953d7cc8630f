"""What a study command decides before its first server run, on one read of the stored study:
the read itself (`read_study_at_start`), the command's budget (`study_budget`) and the lines
that announce the run with the whole command's estimate (`announce`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import ConfigError
from tuner.study.preflight.plan import StoredStudy, read_stored_study
from tuner.study.search.options import OptimizeOptions
from tuner.study.space import Preset
from tuner.study.stages.confirm import floor_start_needed
from tuner.study.stages.confirm_plan import ConfirmPlan

if TYPE_CHECKING:
    from collections.abc import Callable

    from tuner.study.search.budget import Budget

__all__ = ["announce", "read_study_at_start", "study_budget"]


def read_study_at_start(url: str, name: str) -> StoredStudy | None:
    """The stored study as a command finds it (`read_stored_study`); None for a SQLite file not
    there yet, which reading would create: a budget refused after this leaves nothing written."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # the read says what is wrong with it
        return read_stored_study(url, name)
    db = parsed.database or ""
    on_file = parsed.get_backend_name() == "sqlite" and not db.startswith((":memory:", "file:"))
    if on_file and db and not Path(db).expanduser().exists():
        return None
    return read_stored_study(url, name)


def _sizing(options: OptimizeOptions, preset: Preset, stored: StoredStudy | None) -> dict[str, Any]:
    """What the estimate knows of the study's sizing: its calibration, or the window the first
    server will size the workload to (`tuner.study.preflight.plan`)."""
    if stored is not None and stored.calibration is not None:
        return {"calibration": stored.calibration}
    fresh = stored is None or (stored.sizing_off is None and not stored.measured)
    if fresh and options.calibrate and preset.window_s is not None:
        return {"window_s": preset.window_s}
    return {}


def study_budget(
    preset: Preset,
    options: OptimizeOptions,
    plan: ConfirmPlan,
    stored: StoredStudy | None,
    *,
    seconds: float,
    text: str | None,
    started: float,
    trials_cap: int | None,
    chosen_k: bool = True,
) -> Budget:
    """The command's `Budget` (tuner.study.search.budget): `seconds` from `started`, split by
    `options`' baseline re-runs, slots and sizing and by `plan`. A budget that cannot buy a
    baseline and one candidate is refused in one line (ConfigError), before anything is
    written. `chosen_k`: the user (or the preset) fixed the finalists' K; when not, the
    confirmation's power choice may take up to the power table's largest K."""
    from tuner.study.search.budget import END_RESERVE_S, GAP_S, Budget
    from tuner.study.search.estimate import planned_run_s
    from tuner.study.search.power import LARGEST_K
    from tuner.study.search.sampling import enumerate_space

    first = planned_run_s(preset, **_sizing(options, preset, stored))
    configs = enumerate_space(preset)
    budget = Budget(
        budget_s=seconds,
        text=text,
        k=plan.k if plan.enabled else 0,
        rounds=plan.rounds if plan.enabled else 0,
        floor=floor_start_needed(preset),
        baseline_every=options.baseline_every,
        estimate_s=first[0] if first else None,
        estimate_source=first[1] if first else "no recorded run of this model on this GPU",
        trials_cap=trials_cap,
        slots=options.slots or preset.gpu.slots,
        start=started,
        space_size=len(configs) if configs is not None else None,
        k_power=plan.k if chosen_k else LARGEST_K,
    )
    runs = budget.plan()
    if runs is not None and first is not None and runs.runs < 2:
        least = 2 * (first[0] + GAP_S) + END_RESERVE_S
        shown = text or f"{seconds:.0f}s"
        raise ConfigError(
            f"--budget {shown} buys {runs.runs} server run(s) of this preset at about "
            f"{first[0]:.0f} s a run ({first[1]}); a study needs the baseline and a candidate: "
            f"give at least {math.ceil(least / 60)}m"
        )
    return budget


def announce(
    options: OptimizeOptions,
    preset: Preset,
    plan: ConfirmPlan,
    stored: StoredStudy | None,
    *,
    trials: int,
    say: Callable[[str], None],
) -> None:
    """The budget's plan, then, as plain progress lines (none on a terminal), the workload and
    the whole command's estimate, and the confirmation runs the ETA counts on (`planned_runs`:
    a new study's finalists are at most its `trials - 1` candidates). `trials`: the search's
    (0 for `tuner confirm`, whose options have no budget)."""
    from tuner.study.search.estimate import estimate_line, planned_runs
    from tuner.study.search.progress import workload_line

    budget, progress = options.budget, options.progress
    if budget is not None:
        (progress.say if progress is not None else say)(budget.plan_line())
    if progress is None:
        return
    first = budget.plan() if budget is not None else None
    if first is not None:
        trials, reruns, confirm, cap = first.trials, first.reruns, first.confirm_runs, first.rounds
    else:
        reruns, confirm = planned_runs(
            trials,
            k=plan.k,
            rounds=plan.rounds,
            confirm=plan.enabled,
            baseline_every=options.baseline_every,
            candidates=trials - 1 if stored is None else None,
            floor=floor_start_needed(preset),
        )
        cap = plan.rounds if plan.enabled else 0
    progress.say(workload_line(preset))
    sizing = _sizing(options, preset, stored)
    progress.say(estimate_line(preset, trials, confirm, reruns=reruns, **sizing))
    progress.later_runs = confirm
    progress.confirm_cap = cap or None
