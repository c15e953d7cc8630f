"""Workload sizing: a GPU preset's scored window is long enough, or the study is refused."""

from __future__ import annotations

import math
import random
import shutil
from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.study.preflight.plan import shortest_scored_window
from tuner.study.preflight.sizing import (
    MIN_SCORED_S,
    check_sizing,
    mean_tool_latency_s,
    min_tasks,
    size_workload,
)
from tuner.study.space import load_preset

ASSETS = Path(__file__).parents[1] / "assets"


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


def test_a_prefill_bound_window_passes_on_its_measured_length_alone() -> None:
    # The published shape (prompts to 15k tokens, 0.1 s tools): its tool waits are a few
    # seconds, so tools alone never pass it; a measured window of 60 s or more with the
    # fewest tasks an estimate needs does.
    workload = load_preset(model="qwen3.8-27b-shape", gpu="h200").workload
    at_24 = workload.model_copy(
        update={"tasks": 24, "measured_scored_s": 78.0, "separating_tasks": None}
    )
    sizing = check_sizing(at_24, where="qwen3.8-27b-shape/h200")
    assert sizing.floor_s < MIN_SCORED_S  # tools alone would not do
    with pytest.raises(ConfigError, match="under the 60 s"):
        check_sizing(at_24.model_copy(update={"measured_scored_s": None}), where="p")
    with pytest.raises(ConfigError, match="under the 60 s"):
        check_sizing(at_24.model_copy(update={"measured_scored_s": 59.0}), where="p")
    # A measured window does not waive the fewest tasks an estimate needs.
    with pytest.raises(ConfigError):
        check_sizing(at_24.model_copy(update={"tasks": 12}), where="p")


def test_a_preset_that_showed_its_task_count_separates_passes_below_both_floors() -> None:
    # Issue 46: the preset states 8 scored tasks and why (its comment: the window's own sd
    # under the between-start sd); with its measured window that replaces both proxies.
    workload = load_preset(model="qwen3.8-27b-shape", gpu="h200").workload
    assert workload.separating_tasks is not None and workload.measured_scored_s is not None
    assert workload.measured_scored_s < MIN_SCORED_S and workload.tasks < 24
    check_sizing(workload, where="qwen3.8-27b-shape/h200")
    # Without its measured window, or below its own count, or under 2 tasks an agent: refused.
    for change in (
        {"measured_scored_s": None},
        {"tasks": workload.separating_tasks - 1},
        {"separating_tasks": 2 * workload.agents - 1, "tasks": 2 * workload.agents - 1},
    ):
        with pytest.raises(ConfigError):
            check_sizing(workload.model_copy(update=change), where="p")


def test_extras_on_a_measured_study_pass_on_the_study_s_own_windows(tmp_path: Path) -> None:
    # The 2026-12-02 H200 study of the published shape scored 12 tasks a trial (fewer than
    # a new study may ask) in windows of 78-154 s; its confirmation and explain's control must
    # repeat that sizing to compare with its trials, and its windows say it was long enough.
    db = tmp_path / "study.db"
    shutil.copy(ASSETS / "qwen3.8-27b-shape-h200.db", db)
    shortest = shortest_scored_window(f"sqlite:///{db}", "qwen3.8-27b-shape-h200")
    assert shortest is not None and 78 <= shortest < 79  # the console said 78 s (trial 1)
    assert shortest_scored_window(f"sqlite:///{db}", "no-such-study") is None
    stored = load_preset(model="qwen3.8-27b-shape", gpu="h200").workload
    twelve = stored.model_copy(update={"tasks": 12, "measured_scored_s": None})
    with pytest.raises(ConfigError, match="under the 60 s"):
        check_sizing(twelve, where="p")
    assert check_sizing(twelve, where="p", study_scored_s=shortest).tasks == 12
    with pytest.raises(ConfigError, match="under the 60 s"):
        check_sizing(twelve, where="p", study_scored_s=MIN_SCORED_S - 1)
