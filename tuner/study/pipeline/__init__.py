"""`run_study`: the whole of `tuner optimize` as one library call (`run_confirm`: `tuner confirm`).

`tuner.study.optimize()` is the search alone; `run_study` runs, in this order:

1. the stored study read once (`read_study_at_start`), which the budget, the estimate and the
   search's plan (`optimize(stored=...)`) all use; the confirmation plan made once;
2. with a budget, the command's `Budget` (`study_budget`: refused in one line, nothing written,
   when it cannot buy the baseline and a candidate), whose first plan sets the trials;
3. `options.ray_address` checked once (a socket connect), then the study, the budget's plan and
   the whole command's estimate said (`announce`);
4. one Ray for everything below (each stage would otherwise start and stop its own: a CPU run's
   first confirmation run was once interrupted just after the search's Ray shut down), and the
   cluster's slots checked (`cluster_slots`) before the study is opened;
5. the search (`driver.optimize`), the confirmation stage (`confirm_stage` -> `confirm_study`,
   whose runs of queued trials plan themselves on the study the search left), the load sweep
   when the preset sets `load_sweep`, and the answer into optuna-dashboard (`publish`).

Lines go to `say`; what a caller shows as more than a line goes to `StudyHooks` as each part
ends, and all of it comes back in a `StudyRun`. Ctrl-C raises `StudyInterrupted` once the study
has said what stopped; Ray is stopped either way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tuner.errors import ConfigError, StudyError, TunerError
from tuner.study.pipeline.start import announce, read_study_at_start, study_budget
from tuner.study.preflight.plan import StoredStudy, read_stored_study
from tuner.study.search.driver import optimize
from tuner.study.search.options import OptimizeOptions
from tuner.study.search.ray_session import check_ray_address, cluster_slots
from tuner.study.search.summary import StudySummary
from tuner.study.space import Preset, load_preset
from tuner.study.stages.confirm import ConfirmSummary, confirm_study, floor_start_needed
from tuner.study.stages.confirm_plan import DEFAULT_CONFIRM, ConfirmPlan, parse_confirm

if TYPE_CHECKING:
    from tuner.results.load_sweep import LoadSweep
    from tuner.study.search.budget import Budget

__all__ = ["DashboardNote", "StudyHooks", "StudyRun", "run_confirm", "run_study"]

Say = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class DashboardNote:
    """The answer written into optuna-dashboard at the end (`publish_answer`)."""

    study_name: str
    plots: int | None = None  # plots attached; None: the note was not written
    where: Path | None = None  # the artifact store the plots are in
    error: str | None = None  # why the note was not written

    def line(self) -> str:
        """One line for the user."""
        if self.error is not None:
            return (
                f"the dashboard note was not written ({self.error}); `tuner dashboard` writes "
                "it at start"
            )
        return (
            f"dashboard: the recommendation is study {self.study_name}'s note, with "
            f"{self.plots} plots attached (stored in {self.where}); see it with `tuner dashboard`"
        )


@dataclass(frozen=True)
class StudyHooks:
    """What the caller shows beyond plain lines, each called as its part ends (None: nothing
    shown, except `sweep_state` and `published`, which then go to `say`)."""

    searched: Callable[[StudySummary], None] | None = None
    # Called when the stage compared configs (confirmation on, a candidate beside the baseline).
    confirmed: Callable[[ConfirmSummary], None] | None = None
    sweep_state: Say | None = None  # each load-sweep server's state, as it changes
    swept: Callable[[LoadSweep], None] | None = None
    published: Callable[[DashboardNote], None] | None = None


@dataclass(frozen=True)
class StudyRun:
    """What `run_study` (or `run_confirm`) did, for a program to read or a CLI to print."""

    study_name: str
    storage_url: str
    # As given (the search's plan may cut its space); `run_confirm`: the stored one, if any.
    preset: Preset | None
    confirm_plan: ConfirmPlan  # as asked (a stage under way keeps the plan it began with)
    search: StudySummary | None  # None: `run_confirm`, which does not search
    confirmation: ConfirmSummary
    sweep: LoadSweep | None = None  # the load sweep, when the preset sets `load_sweep`
    dashboard: DashboardNote | None = None
    budget: Budget | None = None  # the command's budget, spent

    @property
    def verdicts(self) -> dict[str, dict[str, Any]]:
        """Each judged config's verdict against the baseline (keys: trial numbers, as stored)."""
        return self.confirmation.verdicts


def run_study(
    preset: Preset | str | Path,
    options: OptimizeOptions,
    *,
    n_trials: int | None = None,
    budget_s: float | None = None,
    budget_text: str | None = None,
    confirm: ConfirmPlan | str | None = None,
    say: Say = _stderr,
    hooks: StudyHooks | None = None,
    started: float | None = None,
) -> StudyRun:
    """Run a study end to end as `tuner optimize` does: search, confirm, sweep, publish.

    Args:
        preset: A `Preset`, a preset's name (`"MODEL/GPU"`, as `--model MODEL --gpu GPU`) or
            a preset file.
        options: How to run it (`OptimizeOptions`: storage, cache, study name, Ray address,
            seed, screening, slots, progress...). `options.n_trials` is the search's trials
            when neither `n_trials` nor a budget says otherwise.
        n_trials: Trials that start a server, this run; with a budget, a cap on its plan.
        budget_s: The command's time budget in seconds, counted from `started`: a plan splits
            it into search trials and confirmation rounds (`tuner optimize --budget`).
        budget_text: The budget as the user wrote it (`"20m"`), for the plan's line.
        confirm: The confirmation stage: `"K,R"`, `"0"` or a `ConfirmPlan`; None: the preset's.
        say: Where the pipeline's lines go (stderr by default).
        hooks: What the caller shows as each part ends (tables in the CLI).
        started: `time.monotonic()` when the command started (None: now).

    Raises:
        TunerError: bad input (one line; nothing written), or a failure the study reports.
        StudyInterrupted: Ctrl-C or SIGTERM during the search or the confirmation.
    """
    started = time.monotonic() if started is None else started
    hooks = hooks or StudyHooks()
    preset = _preset(preset)
    chosen_k = confirm is not None or preset.confirm is not None
    if not isinstance(confirm, ConfirmPlan):  # --confirm, else the preset's, else the default
        confirm = parse_confirm(confirm) if confirm else ConfirmPlan.for_preset(preset)
    plan = confirm
    name = options.study_name or preset.study_name
    stored = read_study_at_start(options.storage_url, name)
    spent: Budget | None = None
    if budget_s is not None:
        spent = study_budget(
            preset, options, plan, stored,
            seconds=budget_s, text=budget_text, started=started, trials_cap=n_trials,
            chosen_k=chosen_k,
        )  # fmt: skip
        first = spent.plan()
        n_trials = first.trials if first is not None else spent.slots
    options = replace(
        options,
        n_trials=n_trials if n_trials is not None else options.n_trials,
        budget=spent if spent is not None else options.budget,
    )
    if options.ray_address:  # a socket connect: one line within seconds, before anything is said
        check_ray_address(options.ray_address)
    from tuner.storage import masked

    say(f"study {name} on {masked(options.storage_url)}")
    announce(options, preset, plan, stored, trials=options.n_trials, say=say)
    with _one_ray(options.ray_address):
        # What the cluster offers, before anything is written (one line if short).
        cluster_slots(options.slots, preset.gpu, options.ray_address or "this machine (local)")
        summary = optimize(preset, options, stored=stored)
        if hooks.searched is not None:
            hooks.searched(summary)
        if summary.recovered:
            say(f"re-queued interrupted trials: {list(summary.recovered)}")
        if summary.note:  # e.g. the space is exhausted, or an unfinished run was continued
            say(summary.note)
        options = replace(options, study_name=summary.study_name)
        confirmation = confirm_stage(options, plan, preset, say=say, hooks=hooks)
        sweep = _sweep(options, preset, say=say, hooks=hooks)
        note = publish(options.storage_url, summary.study_name, say=say, hooks=hooks)
    return StudyRun(
        study_name=summary.study_name,
        storage_url=options.storage_url,
        preset=preset,
        confirm_plan=plan,
        search=summary,
        confirmation=confirmation,
        sweep=sweep,
        dashboard=note,
        budget=options.budget,
    )


def run_confirm(
    study_name: str,
    options: OptimizeOptions,
    *,
    confirm: ConfirmPlan | str | None = None,
    say: Say = _stderr,
    hooks: StudyHooks | None = None,
) -> StudyRun:
    """Run (or finish) the confirmation stage of a searched study, then write the dashboard
    note, as `tuner confirm` does. `confirm`: as `run_study`'s; None: the stored preset's.

    Raises:
        StudyError: no such study (before anything is said).
    """
    hooks = hooks or StudyHooks()
    plan = parse_confirm(confirm) if isinstance(confirm, str) else confirm
    options = replace(options, study_name=study_name)
    stored = read_stored_study(options.storage_url, study_name)
    if stored is None:
        from tuner.storage import masked

        raise StudyError(f"no study named {study_name!r} in {masked(options.storage_url)}")
    preset = _stored_preset(stored)
    if plan is None:
        plan = ConfirmPlan.for_preset(preset) if preset is not None else DEFAULT_CONFIRM
    if preset is not None and plan.enabled:
        announce(options, preset, plan, stored, trials=0, say=say)
    confirmation = confirm_stage(options, plan, preset, say=say, hooks=hooks)
    note = publish(options.storage_url, study_name, say=say, hooks=hooks)
    return StudyRun(
        study_name=study_name,
        storage_url=options.storage_url,
        preset=preset,
        confirm_plan=plan,
        search=None,
        confirmation=confirmation,
        dashboard=note,
    )


def _preset(preset: Preset | str | Path) -> Preset:
    if isinstance(preset, Preset):
        return preset
    if isinstance(preset, str) and not preset.endswith((".yaml", ".yml")):
        model, slash, gpu = preset.partition("/")
        if not slash:
            raise ConfigError(f"preset {preset!r}: give MODEL/GPU (e.g. smollm2-135m/cpu)")
        return load_preset(model=model, gpu=gpu)
    return load_preset(space=Path(preset))


def _stored_preset(stored: StoredStudy) -> Preset | None:
    """The preset the study was searched with (None: none stored, or not a preset)."""
    from pydantic import ValidationError

    try:
        return Preset.model_validate(stored.preset or {})
    except ValidationError:
        return None


def confirm_stage(
    options: OptimizeOptions,
    plan: ConfirmPlan,
    preset: Preset | None,
    *,
    say: Say,
    hooks: StudyHooks,
) -> ConfirmSummary:
    """The confirmation stage of `options.study_name`, with a line on what it runs first (with
    a budget, the stage says what the time left buys once the search is over)."""
    if options.budget is not None:  # the stage says what the time left buys
        pass
    elif plan.enabled:
        say(
            f"confirmation: the top {plan.k} candidates (or fewer) and the baseline, up to "
            f"{plan.rounds} more fresh starts each, interleaved in alternating order, stopping "
            "once the "
            f"verdict is decided (first look after {plan.first_look}; the baseline's first "
            "start is the correctness floor)"
        )
    elif preset is None or floor_start_needed(preset):
        say(
            "no confirmation; one more start of the baseline for the correctness floor "
            "(export will say unconfirmed)"
        )
    result = confirm_study(options, plan, say=say)
    if plan.enabled and len(result.configs) >= 2 and hooks.confirmed is not None:
        hooks.confirmed(result)
    return result


def _sweep(
    options: OptimizeOptions, preset: Preset, *, say: Say, hooks: StudyHooks
) -> LoadSweep | None:
    """The load sweep the preset asks for (`load_sweep`): it restarts every finalist."""
    if not preset.load_sweep:
        return None
    from tuner.study.stages.load_sweep import SweepOptions, run_sweep

    assert options.study_name is not None
    agents = preset.load_sweep
    say(f"load sweep of the finalists at {', '.join(map(str, agents))} agents")
    sweep_options = SweepOptions(
        storage_url=options.storage_url,
        cache_dir=options.cache_dir,
        study_name=options.study_name,
        agents=agents,
    )
    sweep = run_sweep(sweep_options, on_state=hooks.sweep_state or say)
    if hooks.swept is not None:
        hooks.swept(sweep)
    return sweep


def publish(url: str, study_name: str, *, say: Say, hooks: StudyHooks) -> DashboardNote:
    """The answer into optuna-dashboard: the study's note and the report's plots as artifacts.
    A failure here loses only the note (`tuner dashboard` writes it at start)."""
    from tuner.results.dashboard import artifact_dir, publish_answer

    try:
        plots = publish_answer(url, study_name)
    except (OSError, TunerError) as exc:  # the study is stored; only its note is missing
        note = DashboardNote(study_name, error=str(exc))
    else:
        note = DashboardNote(study_name, plots=len(plots), where=artifact_dir(url))
    if hooks.published is not None:
        hooks.published(note)
    else:
        say(note.line())
    return note


@contextmanager
def _one_ray(address: str | None) -> Iterator[None]:
    """Ray for the whole command: a local instance, or the cluster at `address` (checked
    already), joined once; a Ray this process runs already is used as it is."""
    import ray

    from tuner.study.search.ray_session import start_ray, stop_ray

    if ray.is_initialized():
        yield
        return
    # The driver's own start of a local instance: its private temp dir; None when joining.
    tmp = start_ray(address, checked=True)
    try:
        yield
    finally:
        stop_ray(tmp)
