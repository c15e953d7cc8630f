"""The sample-efficiency benchmark's pieces: the recorded grid, its replay, the replay backend.

The grid itself was recorded on the real vLLM CPU build (benchmarks/record_grid.py); these tests
check that the replay is faithful to that recording and drives tuner's real study loop.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path

import optuna
import pytest

from benchmarks import record_grid
from benchmarks._grid_replay import DATA, LARGE_DATA, GridReplayBackend, GridTable, closed_loop
from tuner.study.search.driver import request_factory
from tuner.study.search.loop import StudyLoop
from tuner.study.search.loop_settings import LoopSettings
from tuner.study.search.sampling import enumerate_space
from tuner.study.space import config_key

RECORDED = json.loads(DATA.read_text())
OK_RUNS = [r for r in RECORDED["runs"] if r["failure_kind"] is None and r.get("tasks")]


def _complete_table() -> GridTable:
    """The recording, with configs not recorded yet borrowing a recorded run's outcomes.

    Only while the grid is incomplete; the tests below check mechanics, not which config wins.
    """
    data = copy.deepcopy(RECORDED)
    preset = record_grid.PLANS["trimmed"].preset()
    have = {config_key(r["params"]) for r in data["runs"]}
    for i, params in enumerate(record_grid.grid(preset)):
        if config_key(params) not in have:
            run = copy.deepcopy(OK_RUNS[i % len(OK_RUNS)])
            run.update(params=params, rep=0)
            data["runs"].append(run)
    return GridTable(data)


def test_the_recorded_grid_is_the_space_the_sampler_draws_from() -> None:
    preset = record_grid.PLANS["trimmed"].preset()
    ours = {config_key(p) for p in record_grid.grid(preset)}
    space = enumerate_space(preset)
    assert space is not None
    assert ours == {config_key(p) for p in space}
    assert all(config_key(p) in ours for p in record_grid.NOISE_CONFIGS)


def test_the_data_file_is_compact_and_says_how_to_rerecord() -> None:
    assert DATA.stat().st_size < 1_000_000
    assert "record_grid.py" in RECORDED["command"]
    assert OK_RUNS, "no recorded run finished its workload"


@pytest.mark.parametrize("run", OK_RUNS[:6], ids=lambda r: f"rep{r['rep']}")
def test_the_closed_loop_reproduces_the_recorded_schedule(run: dict) -> None:
    # Two agents pulling tasks in suite order: replaying the recorded durations must put each
    # task where it really started (measured: within 7 ms).
    agents = RECORDED["preset"]["workload"]["agents"]
    starts, ends = closed_loop([t[2] for t in run["tasks"]], agents)
    for (_, started, *_), start in zip(run["tasks"], starts, strict=True):
        assert start == pytest.approx(started, abs=0.25)
    assert max(ends) == pytest.approx(run["scored_wall_s"], rel=0.01)


def test_a_config_recorded_twice_alike_replays_without_noise() -> None:
    data = copy.deepcopy(RECORDED)
    data["runs"] = [OK_RUNS[0], {**OK_RUNS[0], "rep": 1}]
    table = GridTable(data)
    assert table.noise.learned  # a config run twice: the noise is learnt from it, here zero
    sim = table.replay(OK_RUNS[0]["params"], random.Random(0))
    assert sim is not None
    assert list(sim.durations) == pytest.approx([t[2] for t in OK_RUNS[0]["tasks"]], rel=1e-3)
    assert sim.tasks_per_hour == pytest.approx(OK_RUNS[0]["tasks_per_hour"], rel=0.01)


def test_without_repeats_a_replay_plays_the_recorded_tasks_without_noise() -> None:
    data = copy.deepcopy(RECORDED)
    data["runs"] = [OK_RUNS[0]]
    table = GridTable(data)
    assert not table.noise.learned
    sim = table.replay(OK_RUNS[0]["params"], random.Random(0))
    assert sim is not None
    assert list(sim.durations) == pytest.approx([t[2] for t in OK_RUNS[0]["tasks"]], rel=1e-3)


def test_a_stopped_trial_costs_what_it_ran_and_reports_finished_tasks_only() -> None:
    table = _complete_table()
    backend = GridReplayBackend(table, 1, random.Random(3))
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    params = table.configs[table.order[0]].params
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    backend.submit(0, make(trial, params))
    while not backend.progress()[trial.number].tasks_done:
        assert backend.wait(1.0) == []
    shown = backend.progress()[trial.number]
    backend.request_stop(trial.number)
    finished = []
    while not finished:
        finished = backend.wait(1.0)
        p = backend.progress().get(trial.number)
        assert p is None or p.tasks_done >= shown.tasks_done
    (done,) = finished
    result = done.result
    assert result is not None and result.pruned and result.workload is not None
    total = len(table.task_ids)
    assert shown.tasks_done <= result.workload.tasks < total
    full = backend.sims[trial.number].cost_s()
    start, end = backend.spans[trial.number]
    assert end - start == pytest.approx(result.wall_s)
    assert end - start < full


def test_the_real_loop_runs_a_replayed_study_within_its_time() -> None:
    table = _complete_table()
    cost = table.grid_cost_s()
    backend = GridReplayBackend(table, 2, random.Random(5))
    study = optuna.create_study(direction="maximize")
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    settings = LoopSettings(n_trials=len(table.configs), seed=5, timeout_s=0.25 * cost / 2)
    StudyLoop(study, table.preset, backend, make, settings).run()
    trials = study.get_trials(deepcopy=False)
    assert trials[0].params == table.preset.baseline_params()
    assert backend.spans and not backend.live
    # No trial starts after the deadline; the ones running then finish.
    assert all(start < 0.25 * cost / 2 for start, _ in backend.spans.values())
    assert len({config_key(dict(t.params)) for t in trials}) == len(trials)  # never a repeat


def test_a_config_that_could_not_start_replays_as_recorded() -> None:
    data = copy.deepcopy(_complete_table().data)
    failed = data["runs"][0]
    for key in ("tasks", "progress", "scored_wall_s", "warmup_s", "tasks_per_hour"):
        failed.pop(key, None)
    failed.update(failure_kind="no_kv_cache_memory", infeasible=True, wall_s=42.0)
    table = GridTable(data)
    backend = GridReplayBackend(table, 1, random.Random(0))
    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    backend.submit(0, make(trial, failed["params"]))
    (done,) = backend.wait(1.0)
    assert done.result is not None
    assert done.result.infeasible and done.result.failure_kind == "no_kv_cache_memory"
    assert backend.clock == pytest.approx(42.0)


def _log_rates(table: GridTable, n: int, seed: int) -> list[float]:
    import math

    params = table.preset.baseline_params()
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sim = table.replay(params, rng)
        assert sim is not None
        out.append(math.log(sim.tasks_per_hour))
    return out


@pytest.mark.parametrize("sd", [0.04, 0.0625, 0.09])
def test_measured_noise_makes_replayed_starts_scatter_by_the_sd_asked(sd: float) -> None:
    import statistics

    table = GridTable.load(LARGE_DATA)
    wide = statistics.pstdev(_log_rates(table, 400, 1))
    got = statistics.pstdev(_log_rates(table.with_run_sd(sd), 400, 1))
    # The grid's repeats (1-2 h apart) scatter by about 11%; the rescaled runs by `sd`, with
    # the tasks' own scatter within a run kept (it is part of `sd`, not added to it).
    assert wide > 0.10
    assert got == pytest.approx(sd, rel=0.15)


def test_a_drifting_box_slows_later_runs_by_the_drift() -> None:
    import math
    import statistics

    table = GridTable.load(LARGE_DATA).with_run_sd(0.0625)
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    params = table.preset.baseline_params()

    def mean_log_rate(drift: float, hours: float) -> float:
        rates = []
        for seed in range(150):
            backend = GridReplayBackend(table, 1, random.Random(seed), drift_per_h=drift)
            backend.clock = hours * 3600.0
            trial = optuna.create_study(direction="maximize").ask()
            backend.submit(0, make(trial, params))
            sim = backend.live[trial.number].sim
            assert sim is not None
            rates.append(math.log(sim.tasks_per_hour))
        return statistics.fmean(rates)

    # Same seeds, two hours into a study on a box losing 15% an hour: log tasks/h 0.30 lower.
    flat, drifting = mean_log_rate(0.0, 2.0), mean_log_rate(-0.15, 2.0)
    assert flat - drifting == pytest.approx(0.30, abs=0.01)
    assert mean_log_rate(-0.15, 0.0) == pytest.approx(flat, abs=1e-9)
