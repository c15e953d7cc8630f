"""Workload sizing: a GPU preset's scored window is long enough, or the study is refused."""

from __future__ import annotations

import math
import random

import pytest

from tuner.errors import ConfigError
from tuner.study.preflight.sizing import (
    MIN_SCORED_S,
    check_sizing,
    mean_tool_latency_s,
    min_tasks,
    size_workload,
)
from tuner.study.space import load_preset


def test_mean_tool_latency_is_the_lognormal_mean_with_p99_twelve_times_the_median() -> None:
    # Drawn independently: a lognormal whose 99th percentile is 12x its median.
    rng = random.Random(7)
    sigma = math.log(12.0) / 2.326347874
    draws = [0.25 * math.exp(rng.gauss(0, sigma)) for _ in range(200_000)]
    assert sorted(draws)[int(0.99 * len(draws))] == pytest.approx(3.0, rel=0.03)
    assert mean_tool_latency_s(0.25) == pytest.approx(sum(draws) / len(draws), rel=0.02)


@pytest.mark.parametrize(
    ("model", "gpu"),
    [("tiny-hybrid-mtp", "h200"), ("smollm2-135m", "h200"), ("qwen3.8-27b", "rtx4090")],
)
def test_every_shipped_gpu_preset_scores_at_least_a_minute(model: str, gpu: str) -> None:
    workload = load_preset(model=model, gpu=gpu).workload
    sizing = check_sizing(workload, where=f"{model}/{gpu}")
    assert sizing.ok and sizing.floor_s >= MIN_SCORED_S
    assert sizing.tasks >= min_tasks(workload.agents)


def test_a_short_gpu_workload_is_refused_with_the_task_count_that_would_do() -> None:
    workload = load_preset(model="tiny-hybrid-mtp", gpu="h200").workload
    short = workload.model_copy(update={"tasks": 24})
    with pytest.raises(ConfigError) as info:
        check_sizing(short, where="preset tiny-hybrid-mtp-h200")
    line = info.value.user_line()
    assert "\n" not in line and "under the 60 s" in line
    needed = size_workload(short).needed_tasks
    assert f"--tasks {needed}" in line
    # The count it names is enough, and one task fewer of the same suite is not.
    assert check_sizing(short.model_copy(update={"tasks": needed}), where="x").ok
    assert size_workload(short.model_copy(update={"tasks": needed - 1})).floor_s < MIN_SCORED_S


def test_without_tool_latency_nothing_bounds_a_gpu_window() -> None:
    workload = load_preset(model="tiny-hybrid-mtp", gpu="h200").workload
    with pytest.raises(ConfigError, match="tool_latency_s is 0"):
        check_sizing(workload.model_copy(update={"tool_latency_s": 0.0}), where="p")


def test_the_floor_grows_with_tasks_and_shrinks_with_agents() -> None:
    workload = load_preset(model="tiny-hybrid-mtp", gpu="h200").workload
    base = size_workload(workload)
    more = size_workload(workload.model_copy(update={"tasks": workload.tasks * 2}))
    wider = size_workload(workload.model_copy(update={"agents": workload.agents * 2}))
    assert more.floor_s > 1.8 * base.floor_s
    assert wider.floor_s == pytest.approx(base.floor_s / 2)
