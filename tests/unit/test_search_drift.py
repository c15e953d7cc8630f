"""The search re-runs its baseline and scores search-time runs against its drift-corrected rate.

The loop, roles, storage, results reader and verdicts are the real code; only the servers'
measurements come from `tuner.testing.scripted_backend` (a named fake, on a simulated clock),
here a machine that drifts: every server start serves `DRIFT` faster than the one before (a
constant share a run, as the recorded sessions drifted: benchmarks/data/noise-model.json), so
a copy of the baseline started later reads faster on its raw score.

Interpolation expectations are worked by hand in the comments, not by the module's formula.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tuner.attrs import Role, StudyAttr, TrialAttr
from tuner.cli.optimize import optimize_cmd
from tuner.metrics import BetweenRunNoise, paired_ratio
from tuner.metrics.drift import baseline_at, drift_corrected_noise
from tuner.results import load_results
from tuner.results.decision import judge_study
from tuner.results.export import choose_export
from tuner.storage import Store
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.roles import (
    DEFAULT_BASELINE_EVERY,
    counts_toward_budget,
    rerun_due,
    role_of,
)
from tuner.study.space import Preset, load_preset
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun

optuna.logging.set_verbosity(optuna.logging.WARNING)

DRIFT = 0.05  # each server start 5% faster (in log) than the one before
BASE_TPH = 1000.0


@pytest.fixture(scope="module")
def preset() -> Preset:
    return load_preset(model="smollm2-135m", gpu="cpu")


# ---- baseline_at: hand-worked numbers ----------------------------------------------------------


def test_between_two_starts_the_rate_is_interpolated_geometrically() -> None:
    # 100 at run 0, 400 at run 2: halfway, sqrt(100 x 400) = 200 (an arithmetic mean: 250).
    at = baseline_at(1, [(0, 100.0), (2, 400.0)])
    assert at.tasks_per_hour == pytest.approx(200.0)
    assert (at.before, at.after) == (0, 2)
    # 100 at run 0, 121 at run 10: at run 5, sqrt(12,100) = 110 (arithmetic: 110.5).
    assert baseline_at(5, [(0, 100.0), (10, 121.0)]).tasks_per_hour == pytest.approx(110.0)
    # A quarter of the way from 100 to 1,600 (x16): x16^(1/4) = x2, so 200.
    assert baseline_at(1, [(0, 100.0), (4, 1600.0)]).tasks_per_hour == pytest.approx(200.0)


def test_the_bracketing_starts_are_the_nearest_on_each_side_in_any_input_order() -> None:
    runs = [(6, 100.0), (0, 100.0), (4, 400.0)]
    # Runs 4 and 6 bracket 5: sqrt(400 x 100) = 200; runs 0 and 4 bracket 2: 200 too.
    five, two = baseline_at(5, runs), baseline_at(2, runs)
    assert five.tasks_per_hour == pytest.approx(200.0) and (five.before, five.after) == (4, 6)
    assert two.tasks_per_hour == pytest.approx(200.0) and (two.before, two.after) == (0, 4)


def test_on_a_start_its_own_rate_and_after_the_last_the_latest_start() -> None:
    runs = [(0, 100.0), (4, 400.0)]
    on = baseline_at(4, runs)
    assert on.tasks_per_hour == 400.0 and (on.before, on.after) == (4, None)
    later = baseline_at(7, runs)  # no start after run 4 yet: the latest, uncorrected
    assert later.tasks_per_hour == 400.0 and (later.before, later.after) == (4, None)
    assert "latest start" in later.describe() and "not corrected" in later.describe()
    first = baseline_at(0, [(2, 100.0), (5, 50.0)])  # before the first start: the first
    assert first.tasks_per_hour == 100.0 and (first.before, first.after) == (None, 2)
    with pytest.raises(ValueError):
        baseline_at(1, [])


def test_the_noise_is_updated_by_the_starts_about_a_drift_line() -> None:
    prior = BetweenRunNoise(0.065, 2, "the prior")
    # Three starts exactly on a drift line: residuals 0 over 3 - 2 = 1 df.
    # sd = sqrt((2 x 0.065^2 + 0) / 3) = sqrt(0.00845 / 3) = 0.053072.
    on_line = [(0, 1000.0), (3, 1000.0 * math.exp(0.15)), (6, 1000.0 * math.exp(0.30))]
    noise = drift_corrected_noise(prior, on_line, reruns=2, every=5)
    assert noise.log_sd == pytest.approx(0.053072, abs=1e-6) and noise.df == 3
    assert "3 baseline starts (2 re-runs during the search, every 5 trials)" in noise.source
    # Log rates 0, 0.1, 0, 0.1 at runs 0..3: the line has slope 0.02 through (1.5, 0.05), so
    # the residuals are -0.02, 0.06, -0.06, 0.02; their squares sum to 0.008, doubled 0.016
    # over 2 df: sd = sqrt((0.00845 + 0.016) / 4) = sqrt(0.0061125) = 0.078182.
    zigzag = [(float(i), 1000.0 * math.exp(y)) for i, y in enumerate((0.0, 0.1, 0.0, 0.1))]
    noise = drift_corrected_noise(prior, zigzag, reruns=3, every=5)
    assert noise.log_sd == pytest.approx(0.078182, abs=1e-6) and noise.df == 4
    assert "+2.02% a run" in noise.source  # e^0.02 - 1
    # Two starts leave nothing after a line: the prior's sd and df, and the source says why.
    two = drift_corrected_noise(prior, on_line[:2], reruns=1, every=5)
    assert (two.log_sd, two.df) == (0.065, 2) and "too few" in two.source


# ---- when a re-run is due ----------------------------------------------------------------------


def _trial(number: int, role: Role, state: TrialState = TrialState.COMPLETE) -> Any:
    return optuna.trial.create_trial(
        state=state,
        value=1.0 if state == TrialState.COMPLETE else None,
        user_attrs={TrialAttr.ROLE: str(role)},
    )


def _numbered(*specs: tuple[Role, TrialState]) -> list[Any]:
    out = []
    for i, (role, state) in enumerate(specs):
        t = _trial(i, role, state)
        t.number = i
        out.append(t)
    return out


def test_a_rerun_is_due_after_every_k_measured_candidates_and_only_once() -> None:
    done = TrialState.COMPLETE
    two = _numbered((Role.BASELINE, done), (Role.CANDIDATE, done), (Role.CANDIDATE, done))
    assert rerun_due(two, 2) and not rerun_due(two, 3) and not rerun_due(two, 0)
    queued = [*two, *_numbered((Role.BASELINE_RERUN, TrialState.WAITING))]
    queued[-1].number = 3
    assert not rerun_due(queued, 2)  # one is queued already: not twice
    ran = _numbered(
        (Role.BASELINE, done),
        (Role.CANDIDATE, done),
        (Role.CANDIDATE, done),
        (Role.BASELINE_RERUN, done),
        (Role.CANDIDATE, done),
        (Role.CONFIRM, done),  # extra roles do not count toward the interval
    )
    assert not rerun_due(ran, 2)  # one candidate since the re-run
    assert not rerun_due(_numbered((Role.BASELINE, TrialState.WAITING)), 1)


def test_the_sampler_learns_values_over_the_drift_corrected_baseline() -> None:
    from datetime import datetime, timedelta

    from tuner.study.search.sampling import drift_corrected_values

    done = TrialState.COMPLETE
    trials = _numbered(
        (Role.BASELINE, done),
        (Role.CANDIDATE, done),
        (Role.BASELINE_RERUN, done),
        (Role.CANDIDATE, done),
    )
    t0 = datetime(2026, 12, 3, 4, 0)
    for t, value in zip(trials, (1000.0, 1100.0, 1210.0, 1331.0), strict=True):
        t.value = value
        t.datetime_start = t0 + timedelta(minutes=3 * t.number)
    # The baseline at run 1 is sqrt(1000 x 1210) = 1100, so the first candidate is 1100 x
    # 1000 / 1100 = 1000; the last ran after the last start (1210): 1331 x 1000 / 1210 = 1100.
    values = drift_corrected_values(trials)
    assert values == pytest.approx({0: 1000.0, 1: 1000.0, 3: 1100.0})
    assert drift_corrected_values(trials[:2]) == {}  # no re-run yet: the values stand


# ---- the loop on a drifting machine ------------------------------------------------------------


def _drifting() -> tuple[Any, list[dict[str, Any]]]:
    """Every start DRIFT faster (in log) than the previous one, whatever its config."""
    starts: list[dict[str, Any]] = []

    def script(params: dict[str, Any]) -> ScriptedRun:
        rate = BASE_TPH * math.exp(DRIFT * len(starts))
        starts.append(params)
        return ScriptedRun(tasks_per_hour=rate, startup_s=5.0)

    return script, starts


def _loop(
    study: optuna.Study,
    preset: Preset,
    script: Any,
    n_trials: int,
    *,
    every: int,
    store: Store | None = None,
    also_try_baseline: bool = False,
) -> ScriptedBackend:
    backend = ScriptedBackend(script, record_tasks=True)
    StudyLoop(
        study,
        preset,
        backend,
        request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent")),
        LoopSettings(
            n_trials=n_trials, seed=0, baseline_every=every, also_try_baseline=also_try_baseline
        ),
        store=store,
    ).run()
    return backend


def _roles(study: optuna.Study) -> list[str]:
    return [role_of(t) for t in study.get_trials() if t.state == TrialState.COMPLETE]


def test_a_drifting_copy_of_the_baseline_looks_faster_raw_but_not_drift_corrected(
    preset: Preset, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'drift.db'}"
    study = optuna.create_study(storage=url, study_name="drift", direction="maximize")
    script, _ = _drifting()
    store = Store(url)
    try:
        _loop(study, preset, script, 6, every=2, store=store, also_try_baseline=True)
    finally:
        store.close()
    # Start order: baseline, its A/A copy, a candidate, the baseline again, two candidates,
    # the baseline again, one candidate.
    assert _roles(study) == [
        "baseline", "candidate", "candidate", "baseline_rerun",
        "candidate", "candidate", "baseline_rerun", "candidate",
    ]  # fmt: skip
    assert study.user_attrs[StudyAttr.BASELINE_EVERY] == 2
    results = load_results(url, "drift")
    base = results.baseline
    copy = next(t for t in results.trials if t.copy_of is not None)
    assert base is not None and copy.outcomes is not None and base.outcomes is not None
    # Raw: the copy ran one start later, so it reads e^0.05 = 5.1% faster than the baseline.
    raw = paired_ratio([copy.outcomes], [base.outcomes])
    assert raw is not None and raw.ratio == pytest.approx(math.exp(DRIFT), rel=1e-3)
    # Drift-corrected: the baseline at run 1, between its starts at runs 0 and 3
    # (1000 and 1000 e^0.15), is 1000 e^0.05: exactly the copy's rate.
    verdict = judge_study(results)[copy.number]
    assert verdict.paired is not None and verdict.drift is not None
    assert verdict.paired.ratio == pytest.approx(1.0, abs=1e-3)
    assert (verdict.drift.before, verdict.drift.after) == (0, 3)
    # The export says where its noise came from: the prior, the study's own starts, the drift.
    line = choose_export(results).noise
    assert "prior" in line and "3 baseline starts (2 re-runs during the search" in line
    assert "a fitted drift of +5.13% a run" in line  # e^0.05 - 1
    assert "interpolated in run order" in line


def test_without_reruns_the_same_drift_makes_the_copy_look_faster(
    preset: Preset, tmp_path: Path
) -> None:
    """The verdict as it was before re-runs (and with --baseline-every 0): the raw pair."""
    url = f"sqlite:///{tmp_path / 'raw.db'}"
    study = optuna.create_study(storage=url, study_name="raw", direction="maximize")
    store = Store(url)
    try:
        _loop(study, preset, _drifting()[0], 4, every=0, store=store, also_try_baseline=True)
    finally:
        store.close()
    results = load_results(url, "raw")
    copy = next(t for t in results.trials if t.copy_of is not None)
    verdict = judge_study(results)[copy.number]
    assert verdict.drift is None and verdict.paired is not None
    assert verdict.paired.ratio == pytest.approx(math.exp(DRIFT), rel=1e-3)  # 5.1% "faster"
    assert "--baseline-every 0" in choose_export(results).noise


def test_reruns_are_not_counted_and_a_resume_neither_loses_nor_repeats_them(
    preset: Preset,
) -> None:
    one = optuna.create_study(direction="maximize")
    _loop(one, preset, _drifting()[0], 8, every=2)
    split = optuna.create_study(direction="maximize")
    _loop(split, preset, _drifting()[0], 5, every=2)
    assert _roles(split).count("baseline_rerun") == 1  # due after 4 candidates, no room left
    _loop(split, preset, _drifting()[0], 3, every=2)  # the resumed run starts with it
    for study in (one, split):
        assert _roles(study) == [
            "baseline", "candidate", "candidate", "baseline_rerun", "candidate", "candidate",
            "baseline_rerun", "candidate", "candidate", "baseline_rerun", "candidate",
        ]  # fmt: skip
        assert sum(counts_toward_budget(t) for t in study.get_trials()) == 8


def test_a_crashed_rerun_runs_again_once(preset: Preset) -> None:
    starts: list[int] = []

    def script(params: dict[str, Any]) -> ScriptedRun:
        starts.append(1)
        # The 4th start is the first re-run: its worker dies once.
        return ScriptedRun(crash="worker died" if len(starts) == 4 else None)

    study = optuna.create_study(direction="maximize")
    _loop(study, preset, script, 4, every=2)
    reruns = [t for t in study.get_trials() if role_of(t) == Role.BASELINE_RERUN]
    assert [t.state for t in reruns] == [TrialState.FAIL, TrialState.COMPLETE]
    assert sum(counts_toward_budget(t) for t in study.get_trials()) == 4


def test_off_means_no_reruns_and_the_cli_default_is_the_chosen_interval(preset: Preset) -> None:
    study = optuna.create_study(direction="maximize")
    _loop(study, preset, _drifting()[0], 6, every=0)
    assert "baseline_rerun" not in _roles(study)
    default = inspect.signature(optimize_cmd).parameters["baseline_every"].default
    assert default == DEFAULT_BASELINE_EVERY == 5


def test_the_progress_line_names_a_rerun_as_uncounted() -> None:
    from tuner.study.search.progress import started_line

    line = started_line(7, {TrialAttr.ROLE: str(Role.BASELINE_RERUN)}, "no speculation")
    assert line == "trial 7 (baseline again: drift check, not counted) started: no speculation"
