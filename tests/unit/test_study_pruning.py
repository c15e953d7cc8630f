"""The pruner rule: lenient near the baseline, firm on a clear loser, silent before it may judge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState

from tuner.attrs import TrialAttr
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.pruning import PruneRule, RunningRate, poisson_upper
from tuner.study.space import load_preset
from tuner.testing.scripted_backend import ScriptedBackend, ScriptedRun

optuna.logging.set_verbosity(optuna.logging.WARNING)

BASELINE = {s: 100.0 for s in range(1, 13)}  # tasks/h by finished tasks


def _rate(tasks_per_hour: float, done: int, total: int = 12) -> RunningRate:
    return RunningRate(done, total, done, done * 3600.0 / tasks_per_hour)


def test_poisson_upper_matches_tabulated_bounds() -> None:
    # Garwood's exact 97.5% one-sided upper limits (Poisson tables): k=0 -> 3.689, 4 -> 10.242.
    assert poisson_upper(0) == pytest.approx(3.689, abs=0.01)
    assert poisson_upper(4) == pytest.approx(10.242, abs=0.01)
    assert poisson_upper(10) == pytest.approx(18.390, abs=0.01)


@pytest.mark.parametrize("done", range(1, 12))
def test_a_candidate_five_percent_under_the_baseline_is_never_pruned(done: int) -> None:
    assert not PruneRule().should_prune(_rate(95.0, done), BASELINE, completed=5)


def test_a_clear_loser_is_pruned_once_a_third_of_its_tasks_are_done() -> None:
    rule = PruneRule()
    decisions = [rule.should_prune(_rate(25.0, done), BASELINE, completed=5) for done in (1, 3, 4)]
    assert decisions == [False, False, True]


def test_nothing_is_pruned_before_the_baseline_and_three_completed_trials() -> None:
    rule = PruneRule()
    loser = _rate(10.0, 8)
    assert not rule.should_prune(loser, None, completed=5)
    assert not rule.should_prune(loser, BASELINE, completed=2)
    assert rule.should_prune(loser, BASELINE, completed=3)


def test_the_loop_prunes_the_loser_and_lets_the_near_miss_finish() -> None:
    preset = load_preset(model="smollm2-135m", gpu="cpu")
    near = {
        "method": "ngram",
        "num_speculative_tokens": 1,
        "prompt_lookup_min": 1,
        "prompt_lookup_max": 2,
        "kv_cache_memory_bytes": 2_000_000_000,
        "max_num_seqs": 8,
    }
    loser = {**near, "num_speculative_tokens": 2}  # fmt: skip

    def script(params: dict[str, Any]) -> ScriptedRun:
        if params == near:
            return ScriptedRun(tasks_per_hour=95.0)
        if params == loser:
            return ScriptedRun(tasks_per_hour=25.0)
        return ScriptedRun(tasks_per_hour=100.0)

    study = optuna.create_study(direction="maximize")
    make = request_factory(preset, model_path="scripted", cache_dir=Path("/nonexistent"))
    StudyLoop(study, preset, ScriptedBackend(script), make, LoopSettings(n_trials=3)).run()
    for params in (near, loser):
        study.enqueue_trial(params, user_attrs={TrialAttr.ROLE: "candidate"})
    StudyLoop(study, preset, ScriptedBackend(script), make, LoopSettings(n_trials=2)).run()
    by_params = {tuple(sorted(t.params.items())): t for t in study.trials}
    kept = by_params[tuple(sorted(near.items()))]
    pruned = by_params[tuple(sorted(loser.items()))]
    assert kept.state == TrialState.COMPLETE and kept.value == pytest.approx(95.0)
    assert pruned.state == TrialState.PRUNED
    assert 4 <= pruned.user_attrs[TrialAttr.PRUNED_AT_TASKS] < 12
    assert pruned.intermediate_values  # what it measured before the stop is kept
