"""vLLM's silent and loud failures under load, on the named fake (`tuner.testing.fake_vllm`).

The real failures need a GPU or a rare engine bug (vLLM #53726: exit 0 after a CUDA illegal
memory access; the CPU build's engine core dying at its first request, then HTTP 500 until the
API server exits), so the fake reproduces what their logs and clients showed, and each test runs
a one-trial study through Optuna, Ray and the store, then reads the trial's stored failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import TrialAttr
from tuner.storage import Store
from tuner.study import Preset, optimize

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    with fake_vllm_ray(num_gpus=1):
        yield


def _one_trial(
    tmp_path: Path,
    *,
    deadline_s: float = 30.0,
    tasks: int = 6,
    guard: dict[str, Any] | None = None,
    **env: str,
) -> FrozenTrial:
    data: dict[str, Any] = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "0.3", **env},
        tasks=tasks,
        tool_latency_s=0.02,
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
        gpu={"name": "fake1", "memory_gib": 24, "count": 1},
    )
    data["workload"]["task_deadline_s"] = deadline_s
    if guard is not None:
        data["workload"]["acceptance_guard"] = guard
    options = fake_options(tmp_path, 1)
    optimize(Preset.model_validate(data), options)
    (trial,) = optuna.load_study(study_name="fake", storage=options.storage_url).trials
    return trial


def _scored_runs(tmp_path: Path, number: int) -> int:
    store = Store(f"sqlite:///{tmp_path / 'study.db'}")
    try:
        return len(store.workload_runs("fake", number))
    finally:
        store.close()


def test_http_500_at_the_first_request_then_exit_is_infeasible_with_the_engines_cause(
    fake_ray: None, tmp_path: Path
) -> None:
    trial = _one_trial(tmp_path, FAKE_VLLM_500_AFTER="0")
    reason = trial.user_attrs[TrialAttr.FAILURE_REASON]
    assert trial.user_attrs[TrialAttr.FAILURE_KIND] == "server_died", trial.user_attrs
    assert trial.user_attrs[TrialAttr.INFEASIBLE] is True
    assert trial.state == TrialState.COMPLETE and trial.value == 0.0
    assert reason.startswith("the vLLM server died at its first request (exit status 1): ")
    assert "RuntimeError: the fake engine core died at request 1" in reason, reason
    assert _scored_runs(tmp_path, trial.number) == 0


def test_http_500_mid_run_then_exit_is_a_crash_not_a_score(fake_ray: None, tmp_path: Path) -> None:
    # Before: the tasks that met HTTP 500 counted as failed tasks and the trial was scored.
    trial = _one_trial(tmp_path, FAKE_VLLM_500_AFTER="5")
    reason = trial.user_attrs[TrialAttr.FAILURE_REASON]
    assert trial.state == TrialState.FAIL, (trial.state, trial.user_attrs)
    assert trial.user_attrs[TrialAttr.FAILURE_KIND] == "server_crashed"
    assert "the vLLM server died during the workload after 5 answered requests" in reason, reason
    assert "(exit status 1): RuntimeError: the fake engine core died at request 6" in reason
    assert _scored_runs(tmp_path, trial.number) == 0


def test_a_healthy_server_that_stops_generating_is_stalled_and_infeasible(
    fake_ray: None, tmp_path: Path
) -> None:
    trial = _one_trial(tmp_path, deadline_s=2.0, FAKE_VLLM_HANG_AFTER="4")
    reason = trial.user_attrs[TrialAttr.FAILURE_REASON]
    assert trial.user_attrs[TrialAttr.FAILURE_KIND] == "server_stalled", trial.user_attrs
    assert trial.user_attrs[TrialAttr.INFEASIBLE] is True
    assert trial.value == 0.0
    assert "2 tasks in a row missed their 2 s deadline (4 model calls answered" in reason, reason
    assert _scored_runs(tmp_path, trial.number) == 0


def test_exit_0_after_a_cuda_error_is_a_crash_with_that_cause(
    fake_ray: None, tmp_path: Path
) -> None:
    trial = _one_trial(tmp_path, FAKE_VLLM_CUDA_EXIT0_AFTER="5")
    reason = trial.user_attrs[TrialAttr.FAILURE_REASON]
    assert trial.state == TrialState.FAIL, (trial.state, trial.user_attrs)
    assert trial.user_attrs[TrialAttr.FAILURE_KIND] == "server_crashed"
    assert "died during the workload after 5 answered requests (exit status 0)" in reason, reason
    assert reason.endswith(
        "AcceleratorError: CUDA error: an illegal memory access was encountered"
    ), reason
    assert _scored_runs(tmp_path, trial.number) == 0


# Scrapes every 0.2 s; windows of 64 drafted tokens (the fake drafts one token per word).
_GUARD = {"interval_s": 0.2, "window_tokens": 64, "min_scrapes": 3}


def test_acceptance_collapsing_mid_run_stops_the_trial_as_infeasible_with_the_numbers(
    fake_ray: None, tmp_path: Path
) -> None:
    # The fake drafts for every answer and accepts half, until request 30: then none (vLLM
    # #52873). Before the guard this trial was scored, as a slow config.
    trial = _one_trial(
        tmp_path,
        tasks=24,
        guard=_GUARD,
        FAKE_VLLM_SPEC="1",
        FAKE_VLLM_ACCEPT_COLLAPSE_AFTER="30",
        FAKE_VLLM_TOKEN_DELAY_S="0.002",
    )
    reason = trial.user_attrs.get(TrialAttr.FAILURE_REASON, "")
    assert trial.user_attrs.get(TrialAttr.FAILURE_KIND) == "acceptance_collapsed", trial.user_attrs
    assert trial.user_attrs[TrialAttr.INFEASIBLE] is True
    assert trial.state == TrialState.COMPLETE and trial.value == 0.0
    found = re.search(
        r"acceptance collapsed: 0 of ([\d,]+) drafted tokens accepted \(0\.0%\) over the last "
        r"[\d.]+ s \((\d+) /metrics scrapes\), after ([\d,]+) of ([\d,]+) \((4\d|50)\.\d%\) "
        r"at first",
        reason,
    )
    assert found is not None, reason
    assert int(found[1].replace(",", "")) >= 64 and int(found[2]) >= 3
    assert _scored_runs(tmp_path, trial.number) == 0


def test_a_healthy_speculative_server_is_scored_with_the_guard_on(
    fake_ray: None, tmp_path: Path
) -> None:
    trial = _one_trial(
        tmp_path, tasks=16, guard=_GUARD, FAKE_VLLM_SPEC="1", FAKE_VLLM_TOKEN_DELAY_S="0.002"
    )
    assert TrialAttr.FAILURE_KIND not in trial.user_attrs, trial.user_attrs
    assert trial.state == TrialState.COMPLETE and (trial.value or 0) > 0
    assert _scored_runs(tmp_path, trial.number) == 1
