"""The public surface of tuner.workload and tuner.metrics is exactly what others call."""

from __future__ import annotations

import inspect

import tuner.metrics
import tuner.workload


def test_workload_public_names() -> None:
    assert set(tuner.workload.__all__) == {
        "REUSE_CLASSES", "CheckResult", "OracleStep", "ReplayScript", "ReplayTurn",
        "RunProgress", "Spread", "SuiteShape", "SuiteStats", "Task", "TaskWorld",
        "TokenCounter", "WorkloadSettings", "build_task_set", "check_task", "classify_reuse",
        "describe_suite", "estimate_tokens", "generate_task", "load_traces", "make_client",
        "normalise_base_url", "run_throughput", "run_throughput_sync", "run_workload",
        "run_workload_sync", "script_for_task", "task_set_hash",
    }  # fmt: skip
    assert all(hasattr(tuner.workload, name) for name in tuner.workload.__all__)


def test_metrics_public_names() -> None:
    assert set(tuner.metrics.__all__) == {
        "EnergyMeter", "FakeNvml", "MetricsSnapshot", "NoEnergyMeter", "NvmlEnergyMeter",
        "DEFAULT_NOISE", "BetweenRunNoise", "OutputCheck", "PairedEstimate", "RunOutcomes",
        "Score", "ServerCounters", "bootstrap_tasks_per_hour", "counter_deltas",
        "energy_meter_for", "holm", "judge_outputs", "makespan", "match_rates", "paired_ratio",
        "paired_success_drop", "parse_metrics", "percentile", "score_tasks",
        "scrape_metrics", "two_proportion_drop", "wilson_interval",
    }  # fmt: skip
    assert all(hasattr(tuner.metrics, name) for name in tuner.metrics.__all__)


def test_runner_signature_is_keyword_only_after_the_client() -> None:
    params = inspect.signature(tuner.workload.run_workload).parameters
    assert list(params) == [
        "client", "base_url", "model", "settings", "tokenizer", "on_progress", "should_stop",
        "energy", "block_size", "on_activity",
    ]  # fmt: skip
    kinds = {name: p.kind for name, p in params.items()}
    assert kinds["client"] is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(k is inspect.Parameter.KEYWORD_ONLY for n, k in kinds.items() if n != "client")
