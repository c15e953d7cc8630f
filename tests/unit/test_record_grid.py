"""The grid recorder's plans: the large grid is big enough to tell a search from a coin.

Recording runs real vLLM for hours (benchmarks/record_grid.py); these tests check the plan it
would run and the checks that keep a run out of a grid, without starting a server.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import optuna

from benchmarks import record_grid
from tuner.study.search.sampling import enumerate_space


def test_the_large_grid_has_48_configs_and_4_noise_configs_run_3_times() -> None:
    grid_plan = record_grid.PLANS["large"]
    preset = grid_plan.preset()
    configs = {record_grid.config_key(p) for p in record_grid.grid(preset)}
    space = enumerate_space(preset)
    assert space is not None
    # The sampler draws from exactly the recorded configs, so a replay never misses one.
    assert configs == {record_grid.config_key(p) for p in space}
    assert len(configs) >= 48
    runs = Counter(key for key, _ in record_grid.plan(preset, grid_plan.noise))
    assert set(runs) == configs
    noisy = [k for k, n in runs.items() if n >= 3]
    assert len(noisy) >= 4
    assert {record_grid.config_key(p) for p in grid_plan.noise} <= set(noisy)
    assert set(runs.values()) == {1, 3}
    # The baseline is among the noise configs (the replay's noise model pairs with it).
    assert record_grid.config_key(preset.baseline_params()) in noisy


def test_the_large_grid_has_its_own_file_and_keeps_the_old_one() -> None:
    large, trimmed = record_grid.PLANS["large"], record_grid.PLANS["trimmed"]
    assert large.data != trimmed.data
    assert large.data.name == "grid-smollm2-135m-cpu-large.json"
    assert "--space large" in large.command
    assert len(list(record_grid.grid(trimmed.preset()))) == 10


def test_the_replay_reads_a_large_grid_file_and_its_finished_half_alone() -> None:
    # Mechanics only (no large recording exists yet): each config borrows a recorded run of
    # the 10-config grid, as the file will hold once `--space large` has run.
    import copy
    import json
    import random

    from benchmarks._grid_replay import GridReplayBackend, GridTable
    from tuner.study.search.driver import request_factory
    from tuner.study.search.loop import StudyLoop
    from tuner.study.search.loop_settings import LoopSettings

    grid_plan = record_grid.PLANS["large"]
    preset = grid_plan.preset()
    old = json.loads(record_grid.DATA.read_text())
    data = record_grid._new_data(preset, grid_plan)
    runs = [r for r in old["runs"] if r.get("tasks")]
    for i, (key, rep) in enumerate(record_grid.plan(preset, grid_plan.noise)):
        run = copy.deepcopy(runs[i % len(runs)])
        run.update(params=json.loads(key), rep=rep)
        data["runs"].append(run)
    table = GridTable(copy.deepcopy(data))
    assert len(table.configs) == 52 and not table.missing()
    backend = GridReplayBackend(table, 1, random.Random(1))
    study = optuna.create_study(direction="maximize")
    make = request_factory(table.preset, model_path="recorded", cache_dir=Path("."))
    StudyLoop(study, table.preset, backend, make, LoopSettings(n_trials=8, seed=1)).run()
    assert len(backend.spans) == 8
    # A grid still being recorded names what it lacks (sample_efficiency refuses it).
    half = [r for r in data["runs"] if r["params"]["kv_cache_memory_bytes"] == 2_000_000_000]
    assert len(GridTable({**data, "runs": half}).missing()) == 26


def test_a_cold_compile_cache_run_is_not_recorded_as_the_config() -> None:
    import json

    from tuner.server.spec import ServerSpec
    from tuner.study.trial.request import TrialResult

    data = json.loads(record_grid.LARGE_DATA.read_text())
    starts = sorted(r["startup_s"] for r in data["runs"] if r.get("tasks_per_hour"))
    median = starts[len(starts) // 2]
    spec = ServerSpec(model="m")

    def run(startup_s: float, failure: str | None = None) -> TrialResult:
        return TrialResult(0, spec, startup_s=startup_s, failure_kind=failure)

    # The first run on a fresh machine (192 s to start, measured) against the grid's starts.
    why = record_grid.cold_start(run(192.0), data)
    assert why is not None and f"({median:.0f} s)" in why
    # The grid's own slowest start is a run like the others.
    assert record_grid.cold_start(run(max(starts)), data) is None
    # A failed start is recorded as the failure it is; a file with few runs judges nothing.
    assert record_grid.cold_start(run(192.0, "startup_timeout"), data) is None
    assert record_grid.cold_start(run(192.0), {"runs": data["runs"][:3]}) is None


def test_runs_of_another_cpu_are_refused_by_the_run_or_the_file_record() -> None:
    zen4 = {"cpu_model": "AMD EPYC", "cpu_family_model": "25/17", "simd_flags": ["avx512f"]}
    zen3 = {"cpu_model": "AMD EPYC", "cpu_family_model": "25/1", "simd_flags": ["avx2"]}
    recorded = {"runs": [{"params": {}, "cpu": {**zen4, "cores": 2}}]}
    why = record_grid.other_machine(recorded, {**zen3, "cores": 2})
    assert why is not None and "25/17" in why and "--out" in why
    assert record_grid.other_machine(recorded, {**zen4, "cores": 2}) is None
    # Same CPU, other core count: its runs do not mix either.
    assert record_grid.other_machine(recorded, {**zen4, "cores": 4}) is not None
    # A file with no CPU record refuses nobody; a file's own `cpu` names the machine of runs
    # that predate the per-run record.
    assert record_grid.other_machine({"runs": [{"params": {}}]}, {**zen3, "cores": 2}) is None
    import json

    large = json.loads(record_grid.LARGE_DATA.read_text())
    why = record_grid.other_machine(large, {**zen3, "cores": 2})
    assert why is not None and "25/17" in why
    zen5 = {**large["cpu"], "cpu_family_model": "26/2"}  # this repository's 2026-12-02 box
    assert record_grid.other_machine(large, zen5) is not None
    assert record_grid.other_machine(large, large["cpu"]) is None
