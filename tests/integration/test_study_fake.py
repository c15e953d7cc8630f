"""The study loop on Ray with stand-in servers (`tuner.testing.fake_vllm`, a named fake).

What cannot run here: GPUs (Ray is given two fake ones, as Ray Tune's tests do) and the Mamba
cache-block failure (it needs CUDA graphs; the fake prints vLLM's exact message).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from tests.integration.conftest import fake_options, fake_preset, fake_vllm_ray
from tuner.attrs import TrialAttr
from tuner.storage import Store
from tuner.study import Preset, optimize

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def fake_ray() -> Iterator[None]:
    """Local Ray with 2 fake GPUs; its workers start the fake server as `vllm`."""
    with fake_vllm_ray(num_gpus=2):
        yield


def _preset(**server_env: str) -> Preset:
    data = fake_preset(
        {"FAKE_VLLM_STARTUP_S": "1.5", **server_env},
        tasks=6,
        tool_latency_s=0.05,
        hybrid=True,
        gpu={"name": "fake2", "memory_gib": 24, "count": 2},
        throughput_streams=[1],
        throughput_requests=2,
        throughput_output_tokens=8,
    )
    return Preset.model_validate(data)


def test_two_fake_gpus_run_two_trials_at_once(fake_ray: None, tmp_path: Path) -> None:
    options = fake_options(tmp_path, 2)
    summary = optimize(_preset(), options)
    assert summary.finished == 2
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE]
    store = Store(options.storage_url)
    starts = [store.server_starts("fake", n)[0].record for n in (0, 1)]
    store.close()
    # Each server had its own GPU, and their lifetimes overlapped.
    assert {s.env["CUDA_VISIBLE_DEVICES"] for s in starts} == {"0", "1"}
    (a0, a1), (b0, b1) = ((s.started_at, s.ended_at) for s in starts)
    assert a1 is not None and b1 is not None
    assert max(a0, b0) < min(a1, b1)


def test_mamba_failure_is_clamped_and_retried(fake_ray: None, tmp_path: Path) -> None:
    options = fake_options(tmp_path, 1)
    optimize(_preset(FAKE_VLLM_MAMBA_BLOCKS="5"), options)
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE
    assert trial.params["max_num_seqs"] == 8
    assert trial.user_attrs[TrialAttr.MAX_NUM_SEQS_REQUESTED] == 8
    assert trial.user_attrs[TrialAttr.MAX_NUM_SEQS_CLAMPED] == 5
    assert trial.user_attrs[TrialAttr.SERVER_SPEC]["max_num_seqs"] == 5
    assert "--max-num-seqs 5" in trial.user_attrs[TrialAttr.SERVE_COMMAND]
    store = Store(options.storage_url)
    first, second = (s.record for s in store.server_starts("fake", 0))
    runs = store.workload_runs("fake", 0)
    store.close()
    assert first.failure_kind == "mamba_blocks_exceeded"
    assert first.failure_details == {"requested": 8, "available": 5}
    assert second.failure_kind is None and second.attempt == 1
    assert second.argv[second.argv.index("--max-num-seqs") + 1] == "5"
    assert runs[0].record.tasks == 6


def _enqueue_slow_candidate(study: optuna.Study, preset: Preset, *, token_delay_s: float) -> None:
    """Queue an n-gram candidate whose fake server spends `token_delay_s` on each token."""
    slow_env = {**preset.model.server_env, "FAKE_VLLM_TOKEN_DELAY_S": str(token_delay_s)}
    study.enqueue_trial(
        {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1,
         "prompt_lookup_max": 3, "max_num_seqs": 8},
        user_attrs={TrialAttr.ROLE: "candidate", TrialAttr.SPEC_OVERRIDES: {"env": slow_env}},
    )  # fmt: skip


def test_a_clearly_losing_candidate_is_pruned_and_keeps_its_measurements(
    fake_ray: None, tmp_path: Path
) -> None:
    from tuner.study import open_study

    preset = _preset()
    options = fake_options(tmp_path, 3)
    optimize(preset, options)  # the baseline and two sampled candidates, all fast
    _enqueue_slow_candidate(open_study(preset, options), preset, token_delay_s=0.1)
    summary = optimize(preset, fake_options(tmp_path, 1))
    assert summary.finished == 4
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    slow = study.trials[3]
    assert slow.state == TrialState.PRUNED
    pruned_at = slow.user_attrs[TrialAttr.PRUNED_AT_TASKS]
    assert 2 <= pruned_at < 6  # not before a third of the tasks
    assert slow.intermediate_values  # it reported tasks/h as tasks finished
    store = Store(options.storage_url)
    (run,) = store.workload_runs("fake", slow.number, with_tasks=True)
    store.close()
    assert run.record.tasks == pruned_at
    assert len([t for t in run.record.task_records if not t.warmup]) >= pruned_at
    assert run.record.tasks_per_hour < min(t.value for t in study.trials[:3])


def test_a_plain_benchmark_failing_after_the_workload_keeps_the_workload(
    fake_ray: None, tmp_path: Path
) -> None:
    options = fake_options(tmp_path, 1)
    summary = optimize(_preset(FAKE_VLLM_DIE_IN_PLAIN_BENCHMARK="1"), options)
    assert summary.finished == 1
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE
    (note,) = trial.user_attrs[TrialAttr.NOTES]
    assert note.startswith("plain benchmark failed after the workload")
    store = Store(options.storage_url)
    (run,) = store.workload_runs("fake", 0)
    throughput = store.throughput_runs("fake", 0)
    store.close()
    assert run.record.tasks == 6 and trial.value == pytest.approx(run.record.tasks_per_hour)
    assert throughput == []


def test_a_second_run_adds_its_trials_and_repeats_none(fake_ray: None, tmp_path: Path) -> None:
    preset = _preset()
    optimize(preset, fake_options(tmp_path, 3))
    summary = optimize(preset, fake_options(tmp_path, 3))
    assert summary.finished == 6 and summary.target == 6
    study = optuna.load_study(study_name="fake", storage=fake_options(tmp_path, 1).storage_url)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE] * 6
    keys = {tuple(sorted(t.params.items())) for t in study.trials}
    assert len(keys) == 6


def test_a_traces_file_shorter_than_tasks_scores_what_it_played(
    fake_ray: None, tmp_path: Path
) -> None:
    conversation = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Find SKU-1."},
        {"role": "assistant", "content": "SKU-1 has 4 on hand."},
    ]
    traces = tmp_path / "traces.jsonl"
    traces.write_text("\n".join(json.dumps(conversation) for _ in range(3)) + "\n")
    preset = _preset()
    workload = preset.workload.model_copy(update={"traces": str(traces)})
    optimize(preset.model_copy(update={"workload": workload}), fake_options(tmp_path, 1))
    study = optuna.load_study(study_name="fake", storage=fake_options(tmp_path, 1).storage_url)
    (trial,) = study.trials
    assert trial.state == TrialState.COMPLETE  # 3 of "6" played is the whole file, not a prune
    store = Store(fake_options(tmp_path, 1).storage_url)
    (run,) = store.workload_runs("fake", 0)
    store.close()
    assert run.record.tasks == 3


def test_a_stalled_server_ends_its_trial_after_one_deadline_per_agent(
    fake_ray: None, tmp_path: Path
) -> None:
    # On an H200, vLLM 0.26.0 with MTP on the tiny hybrid stayed healthy while generating 0.4
    # tokens/s: without the stall rule its 112 tasks would each have waited out the deadline.
    from tuner.study import open_study

    base = _preset()
    preset = base.model_copy(
        update={"workload": base.workload.model_copy(update={"task_deadline_s": 2.0})}
    )
    options = fake_options(tmp_path, 1)
    optimize(preset, options)  # the baseline, fast
    _enqueue_slow_candidate(open_study(preset, options), preset, token_delay_s=1.0)
    summary = optimize(preset, fake_options(tmp_path, 1))
    assert summary.finished == 2
    study = optuna.load_study(study_name="fake", storage=options.storage_url)
    baseline, stalled = study.trials
    assert stalled.state == TrialState.COMPLETE and stalled.value == 0.0
    assert stalled.user_attrs[TrialAttr.INFEASIBLE] is True
    assert stalled.user_attrs[TrialAttr.FAILURE_KIND] == "server_stalled"
    reason = stalled.user_attrs[TrialAttr.FAILURE_REASON]
    assert "2 tasks in a row missed their 2 s deadline" in reason, reason
    assert (baseline.value or 0) > 0
    store = Store(options.storage_url)
    try:
        assert store.workload_runs("fake", stalled.number) == []  # nothing scored
    finally:
        store.close()
