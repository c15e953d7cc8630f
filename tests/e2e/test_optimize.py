"""`tuner optimize` end to end: real vLLM CPU servers, SmolLM2, replay workload, real storage."""

from __future__ import annotations

import optuna
import pytest
from optuna.trial import TrialState

from tests.e2e.conftest import FIRST_RUN_TRIALS, N_TRIALS, CpuStudy
from tuner.attrs import StudyAttr, TrialAttr
from tuner.records import WorkloadRecord
from tuner.storage import Store
from tuner.study.search.roles import counts_toward_budget

pytestmark = pytest.mark.vllm


def _check_study(url: str, name: str, n_trials: int) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name=name, storage=url)
    # `tuner explain` may have added control trials to the shared study; they are not budget.
    trials = [t for t in study.trials if counts_toward_budget(t)]
    assert len(trials) == n_trials, [(t.number, t.state, t.user_attrs) for t in study.trials]
    assert not [t for t in study.trials if t.user_attrs.get(TrialAttr.DUPLICATE_OF) is not None]
    assert trials[0].params["method"] == "none"
    assert trials[0].user_attrs[TrialAttr.ROLE] == "baseline"
    assert len({tuple(sorted(t.params.items())) for t in trials}) == n_trials  # no repeat
    store = Store(url)
    try:
        for t in trials:
            assert t.state in (TrialState.COMPLETE, TrialState.PRUNED), t.user_attrs
            (start,) = store.server_starts(name, t.number)
            kv = start.record.facts.kv_cache_tokens
            assert kv is not None and kv > 8192
            assert t.user_attrs[TrialAttr.KV_CACHE_TOKENS] == kv
            (run,) = store.workload_runs(name, t.number, with_tasks=True)
            w = run.record
            assert w.tasks > 0 and w.task_records
            assert all(task.steps for task in w.task_records)
            assert t.user_attrs[TrialAttr.TASKS_PER_HOUR] == pytest.approx(w.tasks_per_hour, 0.01)
            assert w.prefix_cache_hit_ratio is not None and w.prefix_cache_hit_ratio > 0.3
            if t.params["method"] == "ngram":
                assert w.spec_drafts and w.spec_drafts > 0
            if t.state == TrialState.COMPLETE:
                assert t.value == pytest.approx(w.tasks_per_hour)
    finally:
        store.close()
    return trials


def _runs(study: CpuStudy, number: int) -> list[WorkloadRecord]:
    store = Store(study.storage_url)
    try:
        return [run.record for run in store.workload_runs(study.study_name, number)]
    finally:
        store.close()


def test_cpu_study_finishes_with_measurements(cpu_study: CpuStudy) -> None:
    trials = _check_study(cpu_study.storage_url, cpu_study.study_name, N_TRIALS)
    assert any(t.params["method"] == "ngram" for t in trials), [t.params for t in trials]
    assert f"study {cpu_study.study_name}" in cpu_study.output
    # Its output went to a pipe, not a terminal: one line per event, an estimate, an ETA.
    out = cpu_study.output
    assert "] workload: replay (load shape: answers not graded)" in out, out
    assert "] estimate: " in out and "an estimate from the preset" in out, out
    for t in trials:
        n = t.number
        assert f"] trial {n} " in out and f"] trial {n} server ready: " in out, (n, out)
    assert "] ETA: " in out and "no server run left" in out, out
    assert f"dashboard: the recommendation is study {cpu_study.study_name}'s note" in out, out
    # The first server was calibrated on the real build, once for the study: the measured
    # rates are stored, and the second run of the command reused the sizing (no new probe).
    study = optuna.load_study(study_name=cpu_study.study_name, storage=cpu_study.storage_url)
    calibration = study.user_attrs[StudyAttr.CALIBRATION]
    assert calibration["trial_number"] == trials[0].number, calibration
    assert calibration["prefill_tps"] > 0 and calibration["decode_tps"] > 0, calibration
    assert out.count("] calibrated on trial ") == 1, out
    # Every trial that ran to the end played the calibrated task count (screening stops a
    # pruned one at a rung, with fewer).
    tasks = {
        w.tasks
        for t in trials
        if t.state == TrialState.COMPLETE
        for w in _runs(cpu_study, t.number)
    }
    assert tasks == {calibration["workload"]["tasks"]}, (tasks, calibration)


def test_the_same_command_again_adds_new_trials_and_repeats_none(cpu_study: CpuStudy) -> None:
    # The session study is two runs of the command (tests/e2e/conftest.py): the second kept
    # what the first measured and added one trial whose config none of them had.
    study = optuna.load_study(study_name=cpu_study.study_name, storage=cpu_study.storage_url)
    after = [t for t in study.trials if counts_toward_budget(t)]
    before = cpu_study.first_run
    assert len(before) == FIRST_RUN_TRIALS
    assert [(t.number, t.value, t.params) for t in after[: len(before)]] == list(before)
    (new,) = after[len(before) :]
    assert new.number > max(number for number, _, _ in before)
    assert new.params not in [params for _, _, params in before]
